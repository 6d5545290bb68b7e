#!/usr/bin/env bash
# Sets up a fresh machine (Debian packages), builds, and runs the full test suite.
# This is the README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh build
ctest --test-dir build --output-on-failure -j"$(nproc)"
