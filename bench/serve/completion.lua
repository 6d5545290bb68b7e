-- bench/serve/completion.lua — wrk script for `colibri serve`: POST /v1/completions with a
-- fixed body (non-streaming), counting non-200 answers as errors in the summary.
local body = os.getenv("COLIBRI_LOAD_BODY")
  or '{"prompt": "Once upon a time", "max_tokens": 32, "temperature": 0.8, "ignore_eos": true}'
wrk.method = "POST"
wrk.path = "/v1/completions"
wrk.headers["Content-Type"] = "application/json"
wrk.body = body

local bad = 0
response = function(status, headers, response_body)
  if status ~= 200 then bad = bad + 1 end
end

done = function(summary, latency, requests)
  io.write(string.format("wrk: %d requests in %.1f s: %.1f req/s, latency p50 %.1f ms p99 %.1f ms, socket errors %d, non-200 %d\n",
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
