#!/usr/bin/env python3
"""bench/serve/stream_client.py — streaming load for `colibri serve` (standard library only).

Runs CONCURRENCY threads, each sending REQUESTS streaming completions (SSE) one after another,
and reports time to first token and per-token latency percentiles, tokens/s in aggregate and
errors. Loopback only, bounded in count and time.
Usage: stream_client.py PORT [--concurrency 8] [--requests 4] [--max-tokens 64] [--timeout 120]
"""
import argparse
import http.client
import json
import statistics
import threading
import time


def one_request(port, max_tokens, seed, timeout):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0.8,
                       "seed": seed, "stream": True, "ignore_eos": True})
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        conn.close()
        return None, f"HTTP {resp.status}"
    stamps, done, buf = [], False, b""
    while not done:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                return None, "bad SSE framing"
            data = event[6:]
            if data == b"[DONE]":
                done = True
                break
            j = json.loads(data)
            if "error" in j:
                return None, j["error"]["message"]
            if j["choices"] and j["choices"][0].get("text"):
                stamps.append(time.perf_counter())
    conn.close()
    if not done:
        return None, "stream ended without [DONE]"
    return (start, stamps), None


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--requests", type=int, default=4, help="per thread")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    ttft, gaps, errors, tokens = [], [], [], [0]
    lock = threading.Lock()

    def worker(w):
        for i in range(a.requests):
            res, err = one_request(a.port, a.max_tokens, 1000 * w + i, a.timeout)
            with lock:
                if err:
                    errors.append(err)
                    continue
                start, stamps = res
                tokens[0] += len(stamps)
                if stamps:
                    ttft.append(stamps[0] - start)
                    gaps.extend(b - a_ for a_, b in zip(stamps, stamps[1:]))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    print(f"stream: {a.concurrency} streams x {a.requests} requests x {a.max_tokens} tokens in {wall:.2f} s: "
          f"{tokens[0] / wall:.1f} pieces/s aggregate; ttft p50 {pct(ttft, 50) * 1e3:.1f} ms p99 {pct(ttft, 99) * 1e3:.1f} ms; "
          f"inter-piece p50 {pct(gaps, 50) * 1e3:.2f} ms p99 {pct(gaps, 99) * 1e3:.2f} ms; errors {len(errors)}"
          + (f" (first: {errors[0]})" if errors else ""))
    raise SystemExit(1 if errors else 0)


if __name__ == "__main__":
    main()
