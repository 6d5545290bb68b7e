#!/usr/bin/env bash
# The main job on a fresh machine: install dependencies, build, convert the bundled model
# (models/colibri-tiny-moe, a Hugging Face checkpoint) into an image, verify it and show it.
# When the engine lands this runs `colibri run` on that image instead of stopping at inspect.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
model_dir=models/colibri-tiny-moe
if [[ ! -f $model_dir/config.json ]]; then
  model_dir=tests/fixtures/oracle/mixtral_gqa  # the bundled model is not trained yet: use an oracle fixture
fi
image=build/models/$(basename "$model_dir").colibri
mkdir -p build/models
build/modeltool/colibri-model convert "$model_dir" -o "$image" --force
build/modeltool/colibri-model verify "$image"
build/modeltool/colibri-model inspect "$image"
