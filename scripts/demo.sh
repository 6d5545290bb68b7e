#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build (the build also converts the
# bundled model, models/colibri-tiny-moe, into build/models/colibri-tiny-moe.colibri), check
# the image, and generate text with it: `colibri run` without -m uses that bundled model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
build/modeltool/colibri-model verify build/models/colibri-tiny-moe.colibri
build/cli/colibri run -p "And the LORD said unto Moses," -n 64
