#!/usr/bin/env bash
# Configures and builds Colibri into BUILD_DIR (default: build). Arguments -D... go to the
# configure step; --target T (repeatable) builds only those targets (default: everything).
# Usage: scripts/build.sh [BUILD_DIR] [-DOPTION=VALUE ...] [--target TARGET ...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=build
if [[ $# -gt 0 && $1 != -* ]]; then
  build_dir=$1
  shift
fi
configure=() targets=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --target)
      [[ $# -ge 2 ]] || { echo "build.sh: --target needs a target name" >&2; exit 2; }
      targets+=("$2")
      shift 2
      ;;
    *)
      configure+=("$1")
      shift
      ;;
  esac
done
cmake -S . -B "$build_dir" -G Ninja -DCOLIBRI_WERROR=ON "${configure[@]}" >/dev/null
if ((${#targets[@]})); then
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j"$(nproc)"
fi
