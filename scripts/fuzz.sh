#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (+ASan/UBSan) and runs them, seeded with valid and
# broken inputs: the image reader for SECONDS (default 60), the safetensors header parser, the
# chat-template parser+renderer and inspect's metadata printing for half that each, the
# tokenizer.json loader (+ encode/decode) and `colibri serve`'s request parsing for a third
# each, at most 20 s. Fails on any crash, sanitizer report or slow input (-timeout: every input
# must end in seconds).
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/install-deps.sh
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOLIBRI_WERROR=ON -DCOLIBRI_FUZZ=ON -DCOLIBRI_BENCH=OFF -DCOLIBRI_CUDA=OFF \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_image_reader make_fuzz_seeds fuzz_safetensors fuzz_chat_template \
  fuzz_inspect fuzz_tokenizer_json fuzz_openai_request

run_fuzzer() {  # binary corpus_dir seconds [extra libFuzzer flags]
  local log="build-fuzz/$(basename "$1").log" status=0
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
    "$1" "$2" -max_total_time="$3" -max_len=65536 -timeout=10 -print_final_stats=1 -artifact_prefix=build-fuzz/ \
    "${@:4}" >"$log" 2>&1 ||
    status=$?
  # The progress chatter stays in the log; show the verdict and any report.
  grep -E "^(stat::number_of_executed_runs|stat::new_units_added|==[0-9]+==|SUMMARY|.*runtime error)" "$log" || true
  if [[ $status -ne 0 ]]; then
    tail -n 60 "$log"
    echo "$(basename "$1"): FAILED (exit $status), crash input in build-fuzz/" >&2
    return "$status"
  fi
}

corpus=build-fuzz/corpus/image_reader
rm -rf "$corpus" && mkdir -p "$corpus"
ASAN_OPTIONS=detect_leaks=0 build-fuzz/tests/make_fuzz_seeds "$corpus"
run_fuzzer build-fuzz/tests/fuzz_image_reader "$corpus" "$seconds"
echo "fuzz_image_reader: ${seconds}s without a crash"

st_corpus=build-fuzz/corpus/safetensors
rm -rf "$st_corpus" && mkdir -p "$st_corpus"
for f in tests/fixtures/oracle/*/model.safetensors; do head -c 65536 "$f" > "$st_corpus/$(basename "$(dirname "$f")").safetensors"; done
run_fuzzer build-fuzz/tests/convert/fuzz_safetensors "$st_corpus" "$((seconds / 2))"
echo "fuzz_safetensors: $((seconds / 2))s without a crash"

# Chat templates: the supported families' real templates, the extra subset cases and the
# issue's hostile shapes (tests/fuzz/seeds/chat_template); Jinja keywords as a dictionary.
ct_corpus=build-fuzz/corpus/chat_template
rm -rf "$ct_corpus" && mkdir -p "$ct_corpus"
cp tests/fuzz/seeds/chat_template/* "$ct_corpus/"
run_fuzzer build-fuzz/tests/fuzz_chat_template "$ct_corpus" "$((seconds / 2))" -dict=tests/fuzz/jinja.dict
echo "fuzz_chat_template: $((seconds / 2))s without a crash"

# inspect's metadata printing: real config JSON and the metadata of the seed images' models.
in_corpus=build-fuzz/corpus/inspect
rm -rf "$in_corpus" && mkdir -p "$in_corpus"
for f in tests/fixtures/oracle/*/config.json tests/fixtures/oracle/*/tokenizer_config.json; do
  head -c 65536 "$f" > "$in_corpus/$(basename "$(dirname "$f")")_$(basename "$f")"
done
printf '{"a": %s1%s, "b": "%s"}' "$(printf '[%.0s' {1..200})" "$(printf ']%.0s' {1..200})" "$(printf 'x%.0s' {1..5000})" \
  > "$in_corpus/deep_and_long.json"
run_fuzzer build-fuzz/tests/fuzz_inspect "$in_corpus" "$((seconds / 2))"
echo "fuzz_inspect: $((seconds / 2))s without a crash"
# tokenizer.json: every fixture tokenizer (oracle and edited variants), and one whose normalizer
# nests Sequence past the limit.
tok_corpus=build-fuzz/corpus/tokenizer_json
tok_seconds=$((seconds / 3 < 20 ? seconds / 3 : 20))
rm -rf "$tok_corpus" && mkdir -p "$tok_corpus"
for f in tests/fixtures/oracle/*/tokenizer.json tests/tokenizer/fixtures/variants/*/tokenizer.json; do
  cp "$f" "$tok_corpus/$(basename "$(dirname "$f")").json"
done
{
  printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "normalizer": '
  for _ in $(seq 40); do printf '{"type": "Sequence", "normalizers": ['; done
  printf '{"type": "NFC"}'
  for _ in $(seq 40); do printf ']}'; done
  printf '}'
} >"$tok_corpus/nested_sequence.json"
run_fuzzer build-fuzz/tests/fuzz_tokenizer_json "$tok_corpus" "$tok_seconds"
echo "fuzz_tokenizer_json: ${tok_seconds}s without a crash"

# `colibri serve` request bodies: the committed examples of both endpoints (valid, wrong types,
# deep nesting); the JSON punctuation and field names as a dictionary.
or_corpus=build-fuzz/corpus/openai_request
or_seconds=$((seconds / 3 < 20 ? seconds / 3 : 20))
rm -rf "$or_corpus" && mkdir -p "$or_corpus"
cp tests/fuzz/seeds/openai_request/* "$or_corpus/"
run_fuzzer build-fuzz/tests/fuzz_openai_request "$or_corpus" "$or_seconds" -dict=tests/fuzz/openai.dict
echo "fuzz_openai_request: ${or_seconds}s without a crash"
