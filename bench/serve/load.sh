#!/usr/bin/env bash
# bench/serve/load.sh — load test of `colibri serve` on loopback (docs/performance.md): starts
# the server on a free port, runs wrk (non-streaming completions, bench/serve/completion.lua)
# and the streaming client (bench/serve/stream_client.py), prints requests/s, latency
# percentiles, time to first token, errors (must be 0) and the server's RSS before and after.
# Bounded: DURATION seconds of wrk, a fixed count of streamed requests.
# Usage: bench/serve/load.sh [BUILD_DIR] [-- extra `colibri serve` flags]
#   env-free: knobs are the flags below.
#   --duration S (10)  --connections N (16)  --streams N (8)  --model IMAGE (the bundled one)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build duration=10 connections=16 streams=8 model=""
serve_flags=()
while (($#)); do
  case $1 in
    --duration) duration=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --) shift; serve_flags=("$@"); break ;;
    *) build=$1; shift ;;
  esac
done
command -v wrk >/dev/null || { echo "load.sh: needs wrk (apt-get install wrk)" >&2; exit 2; }
exe=$build/cli/colibri
[[ -x $exe ]] || { echo "load.sh: no $exe: build first (scripts/build.sh)" >&2; exit 2; }
log=$(mktemp)
args=(serve --port 0 --quiet --parallel 8 --queue 256)
[[ -n $model ]] && args+=(-m "$model")
"$exe" "${args[@]}" "${serve_flags[@]}" 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 200); do grep -q "listening on" "$log" && break; sleep 0.05; done
port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
[[ -n $port ]] || { cat "$log" >&2; exit 1; }
rss() { awk '/VmRSS/ {print $2 " kB"}' "/proc/$pid/status"; }
echo "server pid $pid port $port: $(head -1 "$log" | sed 's/colibri serve: //')"
echo "RSS at start: $(rss)"
# Warm-up (first touches of the weights and KV pool), then the measured runs.
wrk -t2 -c4 -d2s -s bench/serve/completion.lua "http://127.0.0.1:$port" >/dev/null
echo "RSS after warm-up: $(rss)"
wrk -t2 -c"$connections" -d"${duration}s" --timeout 60s -s bench/serve/completion.lua "http://127.0.0.1:$port" | grep '^wrk:'
echo "RSS after wrk: $(rss)"
python3 bench/serve/stream_client.py "$port" --concurrency "$streams" --requests 4 --max-tokens 64
echo "RSS after streaming: $(rss)"
wrk -t2 -c"$connections" -d"${duration}s" --timeout 60s -s bench/serve/completion.lua "http://127.0.0.1:$port" | grep '^wrk:'
echo "RSS after a second wrk run: $(rss)"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^colibri_(http_requests_total|engine_rejected_busy_total|engine_max_batch_sequences|generation_tokens_total) '
kill -TERM $pid
wait $pid && echo "server drained and exited 0"
