#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build what it runs (the library, the
# `colibri` CLI, the `colibri-model` tool and the bundled model image, which the build converts
# from models/colibri-tiny-moe into build/models/colibri-tiny-moe.colibri), check the image,
# and generate text with it: `colibri run` without -m uses that bundled model. The test suite
# is not built here: scripts/test.sh builds the rest and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build --target colibri --target colibri-cli --target colibri-model --target colibri-default-model
build/modeltool/colibri-model verify build/models/colibri-tiny-moe.colibri
build/cli/colibri run -p "And the LORD said unto Moses," -n 64
