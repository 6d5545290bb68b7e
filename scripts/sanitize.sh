#!/usr/bin/env bash
# Builds with AddressSanitizer + UndefinedBehaviorSanitizer and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# -O1 -g1 (the optimisation level the sanitizers' docs recommend, line tables for the stack
# traces) instead of RelWithDebInfo's -O2 -g: on the 2-core CI machine the instrumented build
# took 1682 CPU-s at -O2 -g and 860 at -O1 -g1 (14 → 7.6 min), the tests 43 → 60 s.
flags="-O1 -g1 -DNDEBUG"
# COLIBRI_CUDA=OFF: the CUDA module is compile-checked once, by scripts/test.sh's build (its
# device tests skip on CI machines anyway); instrumenting it would only add build time.
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$flags" \
  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$flags" -DCOLIBRI_SANITIZE=ON -DCOLIBRI_BENCH=OFF -DCOLIBRI_CUDA=OFF
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j"$(nproc)"
