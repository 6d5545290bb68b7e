#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (+ASan/UBSan) and runs each for SECONDS (default 60),
# seeded with valid and broken images from make_fuzz_seeds. Fails on any crash or report.
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/install-deps.sh
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_WERROR=ON -DCOLIBRI_FUZZ=ON -DCOLIBRI_BENCH=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_image_reader make_fuzz_seeds
corpus=build-fuzz/corpus/image_reader
rm -rf "$corpus" && mkdir -p "$corpus"
ASAN_OPTIONS=detect_leaks=0 build-fuzz/tests/make_fuzz_seeds "$corpus"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
  build-fuzz/tests/fuzz_image_reader "$corpus" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
  -artifact_prefix=build-fuzz/
echo "fuzz_image_reader: ${seconds}s without a crash"
