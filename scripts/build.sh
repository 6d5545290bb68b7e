#!/usr/bin/env bash
# Configures and builds Colibri into BUILD_DIR (default: build). Extra args go to cmake.
# Usage: scripts/build.sh [BUILD_DIR] [-DOPTION=VALUE ...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true
cmake -S . -B "$build_dir" -G Ninja -DCOLIBRI_WERROR=ON "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
