// bench/engine_bench.cpp — prefill and decode speed of the CPU engine, with the roofline
// measured in the same run (docs/architecture.md §9). Prints figures; asserts nothing.
//
//   engine_bench --model IMAGE [--threads 2] [--reps 3] [--isa avx512|avx2|scalar] [--decode-only | --prefill-only]
//                [--load-into-memory]   (weights copied into huge-page memory, not served from the mapping)
//                [--numa off|bind:N|interleave]  (weights copied into placed memory; prints the open time
//                and the measured placement) [--open-only]  (stop after that line)
//   engine_bench --model IMAGE --moe-vs-read ROUNDS [--threads N] [--isa ...] [--load-into-memory]
//                (only the decode expert stage against a read of the same bytes and the probe,
//                alternating; see moe_vs_read below)
//   --interleave PAIRS (default 30, 0 = off): the "tg, interleaved" row, decode alternated with
//                the probe in 100 ms slices (see decode_interleaved below), and the "pp128,
//                interleaved" row, PAIRS / 3 prefills each next to an FMA peak measurement
//   engine_bench --make DIR --dtype f16|q8 [--shape mixtral|deepseek]   (writes the benchmark-shape checkpoint with
//                the seeded synthetic writer, converts it with colibri-model, then runs)
//
// Decode is reported as a percentage of bandwidth / active weight bytes per token, with the
// bandwidth measured by the shared read probe (bench/probe) on the same thread count right
// before each run, and (the "interleaved" row) in 100 ms slices alternating with decode
// slices; prefill as a percentage of the FMA peak of the instruction set the kernels run on
// (--isa caps it; default: the best the CPU has), measured on the same threads once, and (the
// "interleaved" row) next to every pp128 run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <sys/mman.h>

#include "convert/synthetic_checkpoint.h"
#include "machine_probe.h"
#include "model/model.h"
#include "runtime/session.h"
#include "util/thread_pool.h"

using namespace colibri;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Stats {
  double median, min, max;
};
// The q-quantile of v (0 = min, 0.5 = median, 1 = max): the nearest sorted element.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

Stats stats(const std::vector<double> &v) { return {quantile(v, 0.5), quantile(v, 0), quantile(v, 1)}; }

// KV cache bytes one decode token reads at `mean_position`: per layer and position, the k and v
// rows of the KV heads, or MLA's latent and rope key, in fp32.
double kv_bytes_per_token(const model::Model &m, double mean_position) {
  return static_cast<double>(m.config().kv_values_per_position()) * 4 * static_cast<double>(m.config().layer_count) *
         mean_position;
}

uint64_t matrix_bytes(const model::WeightMatrix &m) { return m.present() ? m.matrix_bytes : 0; }

// Weight bytes one decode token reads (k experts per MoE layer), and the matmul FLOPs of one
// token through the layers (*body_flops) and through the LM head (*head_flops): a prefill
// computes the LM head for its last position only.
void active_per_token(const model::Model &m, uint64_t *bytes, double *body_flops, double *head_flops) {
  const auto &c = m.config();
  uint64_t b = m.token_embedding().row_bytes + matrix_bytes(m.output()) + c.hidden_size * 4;
  *head_flops = 2.0 * static_cast<double>(m.output().rows * m.output().cols);
  double f = 0;
  for (const auto &l : m.layers()) {
    uint64_t attn = 0, params = 0;
    for (const model::WeightMatrix *w : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output, &l.attn_q_a, &l.attn_q_b,
                                         &l.attn_kv_a_mqa, &l.attn_k_b, &l.attn_v_b})
      if (w->present()) {
        attn += w->count * matrix_bytes(*w);
        params += w->count * w->rows * w->cols;
      }
    b += attn + 2 * c.hidden_size * 4;
    if (l.is_moe) {
      b += matrix_bytes(l.router) + c.top_k * (matrix_bytes(l.experts_gate) + matrix_bytes(l.experts_up) + matrix_bytes(l.experts_down));
      params += l.router.rows * l.router.cols + c.top_k * 3 * c.expert_ffn_size * c.hidden_size;
      if (l.shared_gate.present()) {
        b += matrix_bytes(l.shared_gate) + matrix_bytes(l.shared_up) + matrix_bytes(l.shared_down);
        params += 3 * l.shared_gate.rows * c.hidden_size;
      }
    } else {
      b += matrix_bytes(l.dense_gate) + matrix_bytes(l.dense_up) + matrix_bytes(l.dense_down);
      params += 3 * l.dense_gate.rows * c.hidden_size;
    }
    f += 2.0 * static_cast<double>(params);
  }
  *bytes = b;
  *body_flops = f;
}

void print_profile(const char *label, const runtime::SessionStats &st) {
  uint64_t total = 0;
  for (uint64_t ns : st.stage_ns) total += ns;
  const double tokens = static_cast<double>(std::max<uint64_t>(st.tokens, 1));
  std::printf("%s profile (%llu tokens):\n", label, (unsigned long long)st.tokens);
  for (size_t i = 0; i < static_cast<size_t>(runtime::Stage::Count); ++i)
    std::printf("  %-10s %8.3f ms/token  %5.1f%%\n", runtime::kStageNames[i], st.stage_ns[i] / 1e6 / tokens,
                100.0 * st.stage_ns[i] / std::max<uint64_t>(total, 1));
  std::printf("  weight bytes read per token: %.1f MB\n", st.weight_bytes_read / 1e6 / tokens);
}

// The benchmark shapes. "mixtral": vocab 32000, hidden 1024, 8 layers, 16/4 heads of 64, 8
// experts × 2816, top-2. "deepseek": DeepSeek-V3's proportions at hidden 2048 (V3: 7168) — 16
// heads of qk_nope 128 + qk_rope 64 and v 128 as V3's, q_lora_rank 448 and kv_lora_rank 160
// (V3's 1536 and 512 scaled by 2048/7168, to multiples of 32), 64 routed experts of 512 (V3: 256
// of 2048) in 8 groups of which 4 are eligible, top-6, one shared expert, layer 0 dense (5248);
// 4 layers, vocab 32000.
testing::SyntheticCheckpointSpec bench_spec(const std::string &shape) {
  testing::SyntheticCheckpointSpec spec;
  spec.vocab = 32000;
  spec.dtype = "F16";
  spec.seed = 7;
  if (shape == "deepseek") {
    spec.architecture = "DeepseekV3ForCausalLM";
    spec.hidden = 2048;
    spec.layers = 4;
    spec.heads = spec.kv_heads = 16;
    spec.q_lora = 448;
    spec.kv_lora = 160;
    spec.qk_nope = 128;
    spec.qk_rope = 64;
    spec.v_head = 128;
    spec.experts = 64;
    spec.top_k = 6;
    spec.expert_ffn = 512;
    spec.dense_ffn = 5248;
    spec.first_dense = 1;
    spec.shared_experts = 1;
    spec.groups = 8;
    spec.topk_groups = 4;
    return spec;
  }
  spec.architecture = "MixtralForCausalLM";
  spec.hidden = 1024;
  spec.layers = 8;
  spec.heads = 16;
  spec.kv_heads = 4;
  spec.head_dim = 64;
  spec.experts = 8;
  spec.top_k = 2;
  spec.expert_ffn = 2816;
  return spec;
}

std::string make_image(const std::string &dir, const std::string &dtype, const std::string &shape) {
  const testing::SyntheticCheckpointSpec spec = bench_spec(shape);
  const std::string prefix = shape == "deepseek" ? "/deepseek-" : "/bench-";
  std::string hf = dir + prefix + "hf";
  std::string image = dir + prefix + dtype + ".colibri";
  std::printf("writing the benchmark checkpoint to %s ...\n", hf.c_str());
  if (Error e = testing::write_synthetic_checkpoint(hf, spec)) {
    std::fprintf(stderr, "engine_bench: %s\n", e.message.c_str());
    std::exit(1);
  }
  std::string cmd = std::string(COLIBRI_MODEL_EXE) + " convert " + hf + " -o " + image + " --dtype " + dtype + " --force";
  if (std::system(cmd.c_str()) != 0) std::exit(1);
  return image;
}

// One decode step of sequence 0 at `position`, with a token spread over the vocabulary;
// exits on an engine error.
void decode_step(runtime::Session &s, size_t position, uint64_t vocab_size) {
  const runtime::BatchEntry e{0, static_cast<uint32_t>(position), static_cast<int32_t>((position * 104729) % vocab_size), 1};
  if (Error fe = s.forward(&e, 1)) {
    std::fprintf(stderr, "engine_bench: %s\n", fe.message.c_str());
    std::exit(1);
  }
}

// Alternating measurements. The host's bandwidth drifts within seconds (a probe taken right
// before a 1-3 s run and the run itself can see different hosts), so the figures below
// alternate short slices of the engine and of the probe's reader (bench/probe) in one process
// and report the median of the ratios of neighbouring slices.
constexpr double kSliceSeconds = 0.1;

// A pool of the engine's thread count and a buffer of the probe's default size (huge-page
// advised, one slice per pool task, first touched by a pool task), read in slices of about
// kSliceSeconds with the probe's reader; each thread continues where its previous slice
// stopped. The same pool reads any other bytes on request (read_range).
class SliceReader {
 public:
  SliceReader(size_t threads, std::string loads) : pool_(pool_options(threads)), loads_(std::move(loads)), sink_(pool_.thread_count()) {
    const size_t n = pool_.thread_count();
    slice_bytes_ = colibri_probe::default_probe_bytes() / n / kChunk * kChunk;
    const size_t total = (slice_bytes_ * n + kHugePage - 1) / kHugePage * kHugePage;
    buffer_.reset(static_cast<unsigned char *>(std::aligned_alloc(kHugePage, total)));
    if (!buffer_) {
      std::fprintf(stderr, "engine_bench: cannot allocate the %zu MiB probe buffer\n", total >> 20);
      std::exit(1);
    }
    ::madvise(buffer_.get(), total, MADV_HUGEPAGE);  // advisory: failure changes nothing
    pool_.parallel_for(n, [&](size_t t, size_t) { std::memset(buffer_.get() + t * slice_bytes_, static_cast<int>(t + 1), slice_bytes_); });
    cursor_.assign(n, 0);
    read_bytes_.assign(n, 0);
  }
  util::ThreadPool &pool() { return pool_; }
  const std::string &loads() const { return loads_; }

  // Reads the probe buffer for about kSliceSeconds; returns GB/s.
  double probe_slice() {
    const double t0 = now_s();
    pool_.parallel_for(pool_.thread_count(), [&](size_t t, size_t) {
      read_bytes_[t] = 0;
      do {
        read_range(buffer_.get() + t * slice_bytes_ + cursor_[t], kChunk, t);
        cursor_[t] = (cursor_[t] + kChunk) % slice_bytes_;
        read_bytes_[t] += kChunk;
      } while (now_s() - t0 < kSliceSeconds);
    });
    double bytes = 0;
    for (size_t b : read_bytes_) bytes += static_cast<double>(b);
    return bytes / (now_s() - t0) / 1e9;
  }
  // Reads n bytes at p on pool thread `thread` (inside one of this pool's tasks).
  void read_range(const unsigned char *p, size_t n, size_t thread) { sink_[thread] += colibri_probe::read_range(p, n, loads_); }
  // A value that depends on every byte read (printed, so the reads cannot be optimised away).
  unsigned checksum() const {
    uint64_t sum = 0;
    for (uint64_t v : sink_) sum += v;
    return static_cast<unsigned>(sum % 1000);
  }

 private:
  static constexpr size_t kChunk = size_t(4) << 20;
  static constexpr size_t kHugePage = size_t(2) << 20;
  static util::ThreadPoolOptions pool_options(size_t threads) {
    util::ThreadPoolOptions o;
    o.thread_count = threads;
    return o;
  }
  struct Free {
    void operator()(unsigned char *p) const { std::free(p); }
  };
  util::ThreadPool pool_;
  std::string loads_;
  std::unique_ptr<unsigned char, Free> buffer_;
  size_t slice_bytes_ = 0;
  std::vector<size_t> cursor_, read_bytes_;
  std::vector<uint64_t> sink_;
};

// --moe-vs-read: the decode expert stage against a read of the same bytes and against the
// probe, in rounds of three slices (engine, same bytes, probe; the order rotates each round).
// The engine side runs Session::moe_layer on one token with top-k random distinct experts per
// MoE layer (routes given, so no router: gate, up and down of k experts, the merge); the
// same-bytes side reads those experts' gate, up and down bytes on a pool of the same size,
// split the way moe.cpp splits them (4 stripes per thread over the active experts, a gate and
// an up stripe per task, a barrier, then the down stripes). So the engine's shortfall splits
// into what the kernels lose against a read of their bytes and what reading those bytes (in
// stripes, from the model's memory) loses against the probe.
int moe_vs_read(runtime::Session &s, const model::Model &m, size_t threads, int rounds) {
  const auto &c = m.config();
  std::vector<uint32_t> layers;
  for (uint32_t l = 0; l < c.layer_count; ++l)
    if (m.layers()[l].is_moe) layers.push_back(l);
  if (layers.empty() || c.top_k == 0 || c.top_k > c.expert_count) {
    std::fprintf(stderr, "engine_bench: --moe-vs-read needs a model with MoE layers\n");
    return 1;
  }
  const size_t H = c.hidden_size, K = c.top_k, E = c.expert_count;
  std::mt19937 rng(20261130);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> hidden(H), out(H);
  for (float &v : hidden) v = uniform(rng);
  std::vector<int32_t> experts(E);
  std::vector<runtime::Route> routes(K);
  auto pick = [&] {  // K distinct experts, uniformly (a partial Fisher-Yates shuffle)
    for (size_t e = 0; e < E; ++e) experts[e] = static_cast<int32_t>(e);
    for (size_t i = 0; i < K; ++i) {
      std::swap(experts[i], experts[i + rng() % (E - i)]);
      routes[i] = {experts[i], 1.0f / static_cast<float>(K)};
    }
  };
  SliceReader reader(threads, kernels::isa_name(s.isa()));
  util::ThreadPool &pool = reader.pool();
  const size_t stripes = std::max<size_t>(1, (4 * pool.thread_count() + K - 1) / K);
  auto read_stripe = [&](const model::WeightMatrix &w, size_t expert, size_t stripe, size_t thread) {
    const size_t rows_per = (w.rows + stripes - 1) / stripes;
    const size_t r0 = std::min(w.rows, stripe * rows_per), r1 = std::min(w.rows, r0 + rows_per);
    const size_t row_bytes = w.matrix_bytes / w.rows;
    reader.read_range(w.matrix(expert) + r0 * row_bytes, (r1 - r0) * row_bytes, thread);
  };
  // Engine (engine = true) or the same-bytes read for about kSliceSeconds; returns GB/s.
  auto expert_slice = [&](bool engine) {
    double bytes = 0;
    const double t0 = now_s();
    while (now_s() - t0 < kSliceSeconds) {
      for (uint32_t l : layers) {
        const model::LayerWeights &w = m.layers()[l];
        pick();
        if (engine) {
          if (Error e = s.moe_layer(l, hidden.data(), 1, routes.data(), out.data())) {
            std::fprintf(stderr, "engine_bench: %s\n", e.message.c_str());
            std::exit(1);
          }
        } else {
          pool.parallel_for(K * stripes, [&](size_t task, size_t thread) {
            read_stripe(w.experts_gate, routes[task / stripes].expert, task % stripes, thread);
            read_stripe(w.experts_up, routes[task / stripes].expert, task % stripes, thread);
          });
          pool.parallel_for(K * stripes, [&](size_t task, size_t thread) {
            read_stripe(w.experts_down, routes[task / stripes].expert, task % stripes, thread);
          });
        }
        bytes += static_cast<double>(K * (w.experts_gate.matrix_bytes + w.experts_up.matrix_bytes + w.experts_down.matrix_bytes));
      }
    }
    return bytes / (now_s() - t0) / 1e9;
  };
  expert_slice(true);  // warm-up of every side
  expert_slice(false);
  reader.probe_slice();
  std::vector<double> gbs[3], engine_vs_same, same_vs_probe, engine_vs_probe;
  for (int i = 0; i < rounds; ++i) {
    double round[3];
    for (int j = 0; j < 3; ++j) {
      const int side = (i + j) % 3;  // 0 engine, 1 same bytes, 2 probe
      round[side] = side == 2 ? reader.probe_slice() : expert_slice(side == 0);
      gbs[side].push_back(round[side]);
    }
    engine_vs_same.push_back(100 * round[0] / round[1]);
    same_vs_probe.push_back(100 * round[1] / round[2]);
    engine_vs_probe.push_back(100 * round[0] / round[2]);
  }
  std::printf("MoE decode stage (1 token, %zu random experts in each of %zu MoE layers), %d rounds of three %.0f ms slices; "
              "%zu threads, %s kernels and loads:\n",
              K, layers.size(), rounds, kSliceSeconds * 1e3, pool.thread_count(), reader.loads().c_str());
  const char *names[3] = {"engine", "read of the same bytes", "probe read"};
  for (int side = 0; side < 3; ++side)
    std::printf("  %-22s %5.1f GB/s [%.1f..%.1f]\n", names[side], quantile(gbs[side], 0.5), quantile(gbs[side], 0),
                quantile(gbs[side], 1));
  auto ratio_line = [](const char *what, const std::vector<double> &r) {
    std::printf("  %-32s median %.1f%% [quartiles %.1f..%.1f%%]\n", what, quantile(r, 0.5), quantile(r, 0.25), quantile(r, 0.75));
  };
  ratio_line("engine / read of the same bytes:", engine_vs_same);
  ratio_line("read of the same bytes / probe:", same_vs_probe);
  ratio_line("engine / probe:", engine_vs_probe);
  std::printf("  (checksum of the bytes read: %u)\n", reader.checksum());
  return 0;
}

// Decode against the probe in alternating slices (the "tg, interleaved" row): a decode slice
// continues one sequence token by token, restarting it after kPositions tokens so that
// positions cycle as in a tg128 run; a probe slice is SliceReader::probe_slice.
struct InterleavedDecode {
  double tokens_per_s, probe_gbs, pct, pct_q25, pct_q75;
};
InterleavedDecode decode_interleaved(runtime::Session &s, const model::Model &m, size_t threads, double active_bytes,
                                     int pairs) {
  constexpr size_t kPositions = 128;
  const auto &c = m.config();
  SliceReader reader(threads, kernels::isa_name(s.isa()));
  size_t position = 0;
  auto decode_slice = [&] {
    size_t tokens = 0;
    const double t0 = now_s();
    do {
      if (position == kPositions) {
        s.reset_all();
        position = 0;
      }
      decode_step(s, position, c.vocab_size);
      ++position;
      ++tokens;
    } while (now_s() - t0 < kSliceSeconds);
    return static_cast<double>(tokens) / (now_s() - t0);
  };
  // KV reads at the mean position of the cycle.
  const double bytes_per_token = active_bytes + kv_bytes_per_token(m, (kPositions - 1) / 2.0);
  s.reset_all();
  decode_slice();  // warm-up of both sides
  reader.probe_slice();
  std::vector<double> tps, gbs, pct;
  for (int i = 0; i < pairs; ++i) {
    const bool decode_first = i % 2 == 0;  // alternate the order: neither side always goes first
    double d, r;
    if (decode_first) {
      d = decode_slice();
      r = reader.probe_slice();
    } else {
      r = reader.probe_slice();
      d = decode_slice();
    }
    tps.push_back(d);
    gbs.push_back(r);
    pct.push_back(100.0 * d * bytes_per_token / (r * 1e9));
  }
  return {quantile(tps, 0.5), quantile(gbs, 0.5), quantile(pct, 0.5), quantile(pct, 0.25), quantile(pct, 0.75)};
}

}  // namespace

int main(int argc, char **argv) {
  std::string model_path, make_dir, dtype = "f16";
  size_t threads = 2;
  int reps = 3;
  kernels::Isa isa = kernels::Isa::Avx512;
  bool run_prefill = true, run_decode = true, load_into_memory = false;
  util::NumaPolicy numa;
  bool open_only = false;
  int moe_vs_read_rounds = 0, interleave_pairs = 30;
  std::string shape = "mixtral";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "engine_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model") model_path = value();
    else if (a == "--make") make_dir = value();
    else if (a == "--dtype") dtype = value();
    else if (a == "--shape") shape = value();
    else if (a == "--threads") threads = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--reps") reps = std::max(3, std::atoi(value().c_str()));
    else if (a == "--decode-only") run_prefill = false;
    else if (a == "--prefill-only") run_decode = false;
    else if (a == "--load-into-memory") load_into_memory = true;
    else if (a == "--open-only") open_only = true;
    else if (a == "--numa") {
      const std::string v = value();
      if (Error e = util::parse_numa_policy(v, &numa)) {
        std::fprintf(stderr, "engine_bench: --numa: %s\n", e.message.c_str());
        return 2;
      }
    }
    else if (a == "--interleave") interleave_pairs = std::max(0, std::atoi(value().c_str()));
    else if (a == "--moe-vs-read") moe_vs_read_rounds = std::max(1, std::atoi(value().c_str()));
    else if (a == "--isa") {
      const std::string v = value();
      if (!kernels::parse_isa(v.c_str(), &isa)) {
        std::fprintf(stderr, "engine_bench: --isa must be avx512, avx2 or scalar, not '%s'\n", v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: engine_bench (--model IMAGE | --make DIR [--dtype f16|q8|q4] [--shape mixtral|deepseek]) "
                           "[--threads N] [--reps N] "
                           "[--isa avx512|avx2|scalar] [--decode-only | --prefill-only | --moe-vs-read ROUNDS] [--interleave PAIRS] "
                           "[--load-into-memory] [--numa off|bind:N|interleave] [--open-only]\n");
      return 2;
    }
  }
  if (model_path.empty() && make_dir.empty()) {
    std::fprintf(stderr, "engine_bench: give --model IMAGE or --make DIR\n");
    return 2;
  }
  if (model_path.empty()) model_path = make_image(make_dir, dtype, shape);

  Error err;
  model::LoadOptions lo;
  lo.image.populate = true;
  lo.load_into_memory = load_into_memory;
  lo.numa = numa;
  const double open_start = now_s();
  auto m = model::Model::load(model_path, lo, &err);
  const double open_s = now_s() - open_start;
  if (!m) {
    std::fprintf(stderr, "engine_bench: %s\n", err.message.c_str());
    return 1;
  }
  std::printf("open: %.3f s; placement: %s\n", open_s, m->numa_report().c_str());
  if (open_only) return 0;
  runtime::SessionOptions so;
  so.context_length = 1024;
  so.max_batch_tokens = 512;
  so.threads = threads;
  so.max_isa = isa;
  auto s = runtime::Session::create(*m, so, &err);
  if (!s) {
    std::fprintf(stderr, "engine_bench: %s\n", err.message.c_str());
    return 1;
  }
  uint64_t active_bytes;
  double body_flops, head_flops;
  active_per_token(*m, &active_bytes, &body_flops, &head_flops);
  const auto &c = m->config();
  // Attention arithmetic (q·k scores and the weighted sum of values) of a token at position p:
  // 2 FLOP × 2 × p × head_dim per query head and layer.
  const double attention_flops_per_position =
      4.0 * static_cast<double>(c.head_dim) * static_cast<double>(c.head_count) * static_cast<double>(c.layer_count);
  // Work of an n-token prefill from position 0: every token through the layers, attention
  // over its own prefix (mean (n - 1) / 2 earlier positions, plus itself), the LM head once.
  auto prefill_flops = [&](size_t n) {
    const double tokens = static_cast<double>(n);
    return tokens * body_flops + tokens * attention_flops_per_position * (tokens + 1) / 2 + head_flops;
  };
  std::printf("model %s: %s, %llu layers, hidden %llu, %llu experts × %llu (top-%llu), vocab %llu, %s; weights %s\n",
              model_path.c_str(), c.family.c_str(), (unsigned long long)c.layer_count, (unsigned long long)c.hidden_size,
              (unsigned long long)c.expert_count, (unsigned long long)c.expert_ffn_size, (unsigned long long)c.top_k,
              (unsigned long long)c.vocab_size, kernels::isa_name(s->isa()),
              m->image().loaded_into_memory() ? "loaded into memory" : "in the file mapping");
  std::printf("active weight bytes per token: %.1f MB; matmul GFLOP per token: %.3f in the layers + %.3f in the LM head "
              "(a prefill runs the LM head for its last position only); threads %zu\n",
              active_bytes / 1e6, body_flops / 1e9, head_flops / 1e9, s->thread_count());

  if (moe_vs_read_rounds > 0) return moe_vs_read(*s, *m, threads, moe_vs_read_rounds);

  std::vector<runtime::BatchEntry> batch(512);
  auto prefill = [&](size_t n) {
    s->reset_all();
    for (size_t i = 0; i < n; ++i) batch[i] = {0, static_cast<uint32_t>(i), static_cast<int32_t>((i * 7919) % c.vocab_size), i + 1 == n};
    double t0 = now_s();
    if (Error e = s->forward(batch.data(), n)) {
      std::fprintf(stderr, "engine_bench: %s\n", e.message.c_str());
      std::exit(1);
    }
    return static_cast<double>(n) / (now_s() - t0);
  };
  auto decode = [&](size_t n) {
    s->reset_all();
    double t0 = now_s();
    for (size_t i = 0; i < n; ++i) decode_step(*s, i, c.vocab_size);
    return static_cast<double>(n) / (now_s() - t0);
  };

  // The roofline: the read probe with the loads of the kernels' instruction set (see
  // machine_probe.h); with narrower kernels than the CPU's, the widest loads are shown too.
  colibri_probe::ReadProbeOptions ro;
  ro.threads = threads;
  ro.max_isa = kernels::isa_name(s->isa());
  const colibri_probe::ReadProbeResult read = colibri_probe::measure_read_bandwidth(ro);
  const colibri_probe::FmaProbeResult fma = colibri_probe::measure_fma_peak(threads, kernels::isa_name(s->isa()));
  const double bandwidth = read.median_gbs, peak = fma.gflops;
  std::printf("measured: read bandwidth %.1f GB/s [%.1f..%.1f] (%zu MiB, %s loads, %s reader; plain %.1f, prefetching %.1f), "
              "FMA peak %.1f GFLOP/s (%s), %zu threads\n",
              bandwidth, read.min_gbs, read.max_gbs, read.buffer_bytes >> 20, read.loads.c_str(), read.reader.c_str(),
              read.plain_median_gbs, read.prefetch_median_gbs, peak, fma.isa.c_str(), threads);
  if (colibri_probe::probe_isa("") != read.loads) {
    ro.max_isa.clear();
    const colibri_probe::ReadProbeResult wide = colibri_probe::measure_read_bandwidth(ro);
    std::printf("  (with %s loads the probe reads %.1f GB/s [%.1f..%.1f]; the roofline above uses %.1f%% of that)\n", wide.loads.c_str(),
                wide.median_gbs, wide.min_gbs, wide.max_gbs, 100.0 * bandwidth / wide.median_gbs);
  }
  std::printf("\n");
  std::printf("| test  | t/s median | min | max | roofline |\n|---|---|---|---|---|\n");
  decode(8);  // warm-up
  const size_t prefill_sizes[] = {128, 512};
  runtime::SessionStats prefill_stats[std::size(prefill_sizes)];
  for (size_t i = 0; i < std::size(prefill_sizes) && run_prefill; ++i) {
    const size_t n = prefill_sizes[i];
    s->reset_stats();
    std::vector<double> r;
    for (int j = 0; j < reps; ++j) r.push_back(prefill(n));
    prefill_stats[i] = s->stats();
    Stats st = stats(r);
    // t/s × (FLOPs of the whole prefill / n) = FLOP/s.
    double pct = 100.0 * st.median * prefill_flops(n) / static_cast<double>(n) / 1e9 / peak;
    std::printf("| pp%-3zu | %.1f | %.1f | %.1f | %.1f%% of FMA peak |\n", n, st.median, st.min, st.max, pct);
  }
  // The pp128 target, interleaved: each prefill run alternates with an FMA peak measurement
  // (best of 5 trials, ~60 ms), the order alternating, and the percentage is the median
  // of the per-pair ratios (the FMA probe itself swings by 20% between minutes on the VM).
  const int prefill_pairs = interleave_pairs / 3;
  if (run_prefill && prefill_pairs > 0) {
    constexpr size_t n = 128;
    std::vector<double> r, peaks, pct;
    for (int i = 0; i < prefill_pairs; ++i) {
      double tps, gflops;
      if (i % 2 == 0) {
        tps = prefill(n);
        gflops = colibri_probe::measure_fma_peak(threads, kernels::isa_name(s->isa())).gflops;
      } else {
        gflops = colibri_probe::measure_fma_peak(threads, kernels::isa_name(s->isa())).gflops;
        tps = prefill(n);
      }
      r.push_back(tps);
      peaks.push_back(gflops);
      pct.push_back(100.0 * tps * prefill_flops(n) / static_cast<double>(n) / 1e9 / gflops);
    }
    std::printf("| pp128, interleaved | %.1f | | | %.1f%% [quartiles %.1f..%.1f] of FMA peak, %d pairs of a prefill and an FMA "
                "probe (peak %.1f GFLOP/s) |\n",
                quantile(r, 0.5), quantile(pct, 0.5), quantile(pct, 0.25), quantile(pct, 0.75), prefill_pairs, quantile(peaks, 0.5));
  }
  s->reset_stats();
  // Decode: every timed run is paired with a read probe right before it (3 passes, about a
  // second), and the roofline percentage is the median of the per-run ratios. The host's
  // bandwidth drifts by 10-20% over minutes; a ratio of two figures taken seconds apart is
  // what this benchmark can state (docs/architecture.md §9).
  colibri_probe::ReadProbeOptions paired = ro;
  paired.max_isa = kernels::isa_name(s->isa());
  paired.repetitions = 3;
  for (size_t n : {64, 128}) {
    if (!run_decode) break;
    // KV reads at the mean position of the run, n/2.
    const double kv = kv_bytes_per_token(*m, static_cast<double>(n) / 2);
    const double bytes_per_token = static_cast<double>(active_bytes) + kv;
    std::vector<double> r, bw, pct;
    for (int i = 0; i < reps; ++i) {
      bw.push_back(colibri_probe::measure_read_bandwidth(paired).median_gbs);
      r.push_back(decode(n));
      pct.push_back(100.0 * r.back() * bytes_per_token / (bw.back() * 1e9));
    }
    const Stats st = stats(r), sb = stats(bw), sp = stats(pct);
    std::printf("| tg%-3zu | %.2f | %.2f | %.2f | %.1f%% [%.1f..%.1f] of bandwidth / bytes per token (paired probes %.1f GB/s [%.1f..%.1f]) |\n",
                n, st.median, st.min, st.max, sp.median, sp.min, sp.max, sb.median, sb.min, sb.max);
  }
  if (run_decode && interleave_pairs > 0) {
    const InterleavedDecode d = decode_interleaved(*s, *m, threads, static_cast<double>(active_bytes), interleave_pairs);
    std::printf("| tg, interleaved | %.2f | | | %.1f%% [quartiles %.1f..%.1f] of bandwidth / bytes per token, %d pairs of "
                "%.0f ms decode and probe slices (probe %.1f GB/s) |\n",
                d.tokens_per_s, d.pct, d.pct_q25, d.pct_q75, interleave_pairs, kSliceSeconds * 1e3, d.probe_gbs);
  }
  if (run_decode) {
    print_profile("decode", s->stats());
    std::printf("\n");
  }
  for (size_t i = 0; i < std::size(prefill_sizes) && run_prefill; ++i) {
    const std::string title = "prefill pp" + std::to_string(prefill_sizes[i]);
    print_profile(title.c_str(), prefill_stats[i]);
    std::printf("\n");
  }
  return 0;
}
