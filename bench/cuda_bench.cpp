// bench/cuda_bench.cpp — decode speed of the CUDA backend against the device's HBM roofline
// (docs/performance.md, "CUDA"). Prints figures (and writes them to --out); asserts nothing.
//
//   cuda_bench --make DIR [--shape medium|small] [--dtype bf16|f16]   writes the benchmark
//              checkpoint with the seeded synthetic writer, converts it, then runs
//   cuda_bench --model IMAGE
//   common: [--device N] [--reps 3] [--tokens 128] [--hbm-gbs 4800] [--out FILE]
//
// Rows: decode batch 1 (one graph launch per token), decode batch 8 and 32 (8 or 32 sequences,
// one token each per step: the eager path in chunks of 8), prefill of 512 tokens (chunks of 8: the simple
// path). Each row: median, min and max of --reps runs after a warm-up. The roofline of decode
// batch 1 is tokens/s × active weight bytes per token / the HBM bandwidth (--hbm-gbs, default
// the H200's 4800 GB/s; the KV cache reads are left out: small at these positions).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "convert/synthetic_checkpoint.h"
#include "model/model.h"
#include "runtime/session.h"

using namespace colibri;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Stats {
  double median, min, max;
};
Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

uint64_t bytes_of(const model::WeightMatrix &w) { return w.present() ? w.matrix_bytes : 0; }

// Weight bytes one decode token reads: every non-expert tensor, top_k experts per MoE layer.
uint64_t active_bytes(const model::Model &m) {
  const auto &c = m.config();
  uint64_t b = m.token_embedding().row_bytes + bytes_of(m.output()) + c.hidden_size * 4;
  for (const auto &l : m.layers()) {
    b += bytes_of(l.attn_q) + bytes_of(l.attn_k) + bytes_of(l.attn_v) + bytes_of(l.attn_output) + 2 * c.hidden_size * 4;
    if (l.is_moe)
      b += bytes_of(l.router) + c.top_k * (bytes_of(l.experts_gate) + bytes_of(l.experts_up) + bytes_of(l.experts_down)) +
           bytes_of(l.shared_gate) + bytes_of(l.shared_up) + bytes_of(l.shared_down);
    else
      b += bytes_of(l.dense_gate) + bytes_of(l.dense_up) + bytes_of(l.dense_down);
  }
  return b;
}

std::string make_image(const std::string &dir, const std::string &shape, const std::string &dtype) {
  testing::SyntheticCheckpointSpec spec;
  spec.architecture = "MixtralForCausalLM";
  if (shape == "small") {  // seconds to write: a smoke run of the script
    spec.vocab = 32000;
    spec.hidden = 1024;
    spec.layers = 4;
    spec.heads = 16;
    spec.kv_heads = 4;
    spec.head_dim = 64;
    spec.experts = 8;
    spec.top_k = 2;
    spec.expert_ffn = 2816;
  } else {  // medium: Mixtral-8x7B's layer shape, 2 layers (~5.7 GB in bf16)
    spec.vocab = 32000;
    spec.hidden = 4096;
    spec.layers = 2;
    spec.heads = 32;
    spec.kv_heads = 8;
    spec.head_dim = 128;
    spec.experts = 8;
    spec.top_k = 2;
    spec.expert_ffn = 14336;
  }
  spec.dtype = dtype == "f16" ? "F16" : "BF16";
  spec.seed = 7;
  const std::string hf = dir + "/cuda-bench-" + shape + "-hf";
  const std::string image = dir + "/cuda-bench-" + shape + "-" + dtype + ".colibri";
  std::printf("writing the benchmark checkpoint to %s ...\n", hf.c_str());
  if (Error e = testing::write_synthetic_checkpoint(hf, spec)) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.message.c_str());
    std::exit(1);
  }
  const std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + hf + " -o " + image + " --dtype " + dtype + " --force";
  if (std::system(cmd.c_str()) != 0) std::exit(1);
  return image;
}

void step(runtime::Session &s, const std::vector<runtime::BatchEntry> &batch) {
  if (Error e = s.forward(batch.data(), batch.size())) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.message.c_str());
    std::exit(1);
  }
}

// Tokens per second of `tokens` decode steps of `sequences` sequences after a prompt of 8.
double decode_rate(runtime::Session &s, size_t sequences, size_t tokens, uint64_t vocab) {
  s.reset_all();
  std::vector<runtime::BatchEntry> batch;
  for (uint32_t q = 0; q < sequences; ++q)
    for (uint32_t p = 0; p < 8; ++p) batch.push_back({q, p, static_cast<int32_t>((q * 31 + p * 7) % vocab), p == 7});
  for (size_t i = 0; i < batch.size(); i += 8) step(s, {batch.begin() + i, batch.begin() + std::min(batch.size(), i + 8)});
  const double t0 = now_s();
  for (uint32_t t = 0; t < tokens; ++t) {
    batch.clear();
    for (uint32_t q = 0; q < sequences; ++q)
      batch.push_back({q, 8 + t, static_cast<int32_t>((t * 104729 + q) % vocab), 1});
    step(s, batch);
  }
  return static_cast<double>(tokens * sequences) / (now_s() - t0);
}

double prefill_rate(runtime::Session &s, size_t n, uint64_t vocab) {
  s.reset_all();
  std::vector<runtime::BatchEntry> batch;
  for (uint32_t p = 0; p < n; ++p) batch.push_back({0, p, static_cast<int32_t>((p * 7919) % vocab), p + 1 == n});
  const double t0 = now_s();
  step(s, batch);
  return static_cast<double>(n) / (now_s() - t0);
}

}  // namespace

int main(int argc, char **argv) {
  std::string model_path, make_dir, shape = "medium", dtype = "bf16", out_path;
  uint32_t device = 0;
  int reps = 3;
  size_t tokens = 128;
  double hbm_gbs = 4800.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cuda_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_path = value();
    else if (a == "--make") make_dir = value();
    else if (a == "--shape") shape = value();
    else if (a == "--dtype") dtype = value();
    else if (a == "--device") device = static_cast<uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    else if (a == "--reps") reps = std::max(3, std::atoi(value().c_str()));
    else if (a == "--tokens") tokens = std::max<size_t>(8, std::strtoull(value().c_str(), nullptr, 10));
    else if (a == "--hbm-gbs") hbm_gbs = std::strtod(value().c_str(), nullptr);
    else if (a == "--out") out_path = value();
    else {
      std::fprintf(stderr, "usage: cuda_bench (--model IMAGE | --make DIR [--shape medium|small] [--dtype bf16|f16]) "
                           "[--device N] [--reps N] [--tokens N] [--hbm-gbs GB/s] [--out FILE]\n");
      return 2;
    }
  }
  if (model_path.empty() && make_dir.empty()) {
    std::fprintf(stderr, "cuda_bench: give --model IMAGE or --make DIR\n");
    return 2;
  }
  if (model_path.empty()) model_path = make_image(make_dir, shape, dtype);
  Error err;
  auto m = model::Model::load(model_path, {}, &err);
  if (!m) {
    std::fprintf(stderr, "cuda_bench: %s\n", err.message.c_str());
    return 1;
  }
  const auto &c = m->config();
  runtime::SessionOptions so;
  so.context_length = 1024;
  so.max_sequences = 32;
  so.max_batch_tokens = 512;
  so.max_logit_rows = 32;
  so.device.kind = runtime::DeviceKind::Cuda;
  so.device.index = device;
  so.device_module_path = COLIBRI_CUDA_MODULE_PATH;
  const double create_start = now_s();
  auto s = runtime::Session::create(*m, so, &err);
  if (!s) {
    std::fprintf(stderr, "cuda_bench: %s\n", err.message.c_str());
    return 1;
  }
  const double create_s = now_s() - create_start;
  const colibri_device_context_info info0 = s->device()->info();
  const uint64_t active = active_bytes(*m);
  std::string report;
  auto line = [&](const std::string &text) {
    std::printf("%s\n", text.c_str());
    report += text + "\n";
  };
  char buf[1024];
  std::snprintf(buf, sizeof buf, "device: cuda:%u %s; session created (weights uploaded) in %.2f s", device,
                info0.device_name, create_s);
  line(buf);
  std::snprintf(buf, sizeof buf,
                "model %s: %s, %llu layers, hidden %llu, %llu experts x %llu (top-%llu), vocab %llu; device memory: "
                "weights %.2f GB, KV %.2f GB, buffers %.2f GB",
                model_path.c_str(), c.family.c_str(), (unsigned long long)c.layer_count, (unsigned long long)c.hidden_size,
                (unsigned long long)c.expert_count, (unsigned long long)c.expert_ffn_size, (unsigned long long)c.top_k,
                (unsigned long long)c.vocab_size, info0.weight_bytes / 1e9, info0.kv_cache_bytes / 1e9,
                info0.buffer_bytes / 1e9);
  line(buf);
  std::snprintf(buf, sizeof buf, "active weight bytes per token: %.1f MB; HBM roofline %.0f GB/s = %.0f tokens/s",
                active / 1e6, hbm_gbs, hbm_gbs * 1e9 / static_cast<double>(active));
  line(buf);
  decode_rate(*s, 1, 16, c.vocab_size);  // warm-up (captures the graph)
  std::vector<double> d1, d8, d32, pp;
  for (int r = 0; r < reps; ++r) {
    d1.push_back(decode_rate(*s, 1, tokens, c.vocab_size));
    d8.push_back(decode_rate(*s, 8, tokens / 4, c.vocab_size));
    d32.push_back(decode_rate(*s, 32, tokens / 8, c.vocab_size));
    pp.push_back(prefill_rate(*s, 512, c.vocab_size));
  }
  const Stats a = stats(d1), b = stats(d8), b32 = stats(d32), p = stats(pp);
  line("| test | t/s median | min | max | % of HBM roofline (weights) |");
  line("|---|---|---|---|---|");
  std::snprintf(buf, sizeof buf, "| tg%zu batch 1 | %.1f | %.1f | %.1f | %.1f%% |", tokens, a.median, a.min, a.max,
                100.0 * a.median * static_cast<double>(active) / (hbm_gbs * 1e9));
  line(buf);
  std::snprintf(buf, sizeof buf, "| tg%zu batch 8 | %.1f | %.1f | %.1f | — |", tokens / 4, b.median, b.min, b.max);
  line(buf);
  std::snprintf(buf, sizeof buf, "| tg%zu batch 32 | %.1f | %.1f | %.1f | — |", tokens / 8, b32.median, b32.min, b32.max);
  line(buf);
  std::snprintf(buf, sizeof buf, "| pp512 (chunks of 8) | %.1f | %.1f | %.1f | — |", p.median, p.min, p.max);
  line(buf);
  const colibri_device_context_info info = s->device()->info();
  std::snprintf(buf, sizeof buf,
                "decode batch 1: one graph launch per token, %llu kernels per step; graph launches %llu, eager passes "
                "%llu, device time %.1f ms",
                (unsigned long long)info.graph_kernels, (unsigned long long)info.graph_launches,
                (unsigned long long)info.eager_steps, info.device_ms);
  line(buf);
  if (!out_path.empty()) {
    FILE *f = std::fopen(out_path.c_str(), "w");
    if (!f || std::fputs(report.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "cuda_bench: cannot write %s\n", out_path.c_str());
      return 1;
    }
  }
  return 0;
}
