// core/runtime/session.cpp — session creation, the forward pass (top to bottom, one
// comment per step), and the shared matmul split. Attention lives in attention.cpp, the
// MoE block (routing, dispatch, experts, merge) in moe.cpp.
#include "runtime/session.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "image/dtype_convert.h"
#include "runtime/buffers.h"
#include "runtime/row_split.h"
#include "util/strings.h"

namespace colibri::runtime {

using util::strprintf;

Session::Session(const model::Model &model, const SessionOptions &options) : model_(model), options_(options) {}
Session::~Session() = default;

std::unique_ptr<Session> Session::create(const model::Model &model, const SessionOptions &options_in, Error *error) {
  const model::ModelConfig &c = model.config();
  SessionOptions options = options_in;
  if (options.context_length == 0)
    options.context_length = static_cast<uint32_t>(std::min<uint64_t>(c.max_position_embeddings ? c.max_position_embeddings : 4096, 4096));
  if (options.max_logit_rows == 0) options.max_logit_rows = options.max_sequences;
  auto invalid = [&](std::string m) {
    *error = make_error(ErrorKind::InvalidArgument, std::move(m));
    return nullptr;
  };
  auto unsupported = [&](std::string m) {
    *error = make_error(ErrorKind::Unsupported, std::move(m));
    return nullptr;
  };
  if (options.max_sequences == 0 || options.max_sequences > 4096)
    return invalid(strprintf("max_sequences %u is out of range (1..4096)", options.max_sequences));
  if (options.max_batch_tokens == 0 || options.max_batch_tokens > 65536)
    return invalid(strprintf("max_batch_tokens %u is out of range (1..65536)", options.max_batch_tokens));
  if (options.context_length > (1u << 24))
    return invalid(strprintf("context_length %u is out of range (1..16777216)", options.context_length));
  if (options.max_logit_rows > options.max_batch_tokens) options.max_logit_rows = options.max_batch_tokens;
  if (options.threads > 1024) return invalid(strprintf("threads %zu is out of range (0..1024)", options.threads));
  if (options.kv_block_tokens > kMaxKvBlockTokens)
    return invalid(strprintf("kv_block_tokens %u is out of range (0 = contiguous, 1..%u)", options.kv_block_tokens,
                             kMaxKvBlockTokens));
  // Paged: blocks of the pool (default: every sequence's whole context); contiguous: one
  // context-long block per sequence.
  const uint64_t blocks_per_sequence =
      options.kv_block_tokens ? (options.context_length + options.kv_block_tokens - 1) / options.kv_block_tokens : 1;
  if (options.kv_block_tokens && options.kv_blocks == 0 && options.kv_budget_bytes == 0) {
    const uint64_t all = blocks_per_sequence * options.max_sequences;
    if (all > kMaxKvBlocks)
      return invalid(strprintf("the paged KV cache would need %llu blocks for every sequence's whole context (at most "
                               "%u); set kv_blocks",
                               static_cast<unsigned long long>(all), kMaxKvBlocks));
    options.kv_blocks = static_cast<uint32_t>(all);
  }
  if (options.kv_blocks > kMaxKvBlocks)
    return invalid(strprintf("kv_blocks %u is out of range (at most %u)", options.kv_blocks, kMaxKvBlocks));
  const bool on_device = options.device.kind == DeviceKind::Cuda;
  KvCacheShape shape;
  // On a device the host cache only keeps the block tables (no storage: layers 0).
  shape.layers = on_device ? 0 : static_cast<uint32_t>(c.layer_count);
  shape.kv_dim = static_cast<uint32_t>(model.kv_dim());
  shape.context_length = options.context_length;
  shape.sequences = options.max_sequences;
  shape.block_tokens = options.kv_block_tokens;
  shape.block_count = options.kv_blocks;
  shape.f16 = options.kv_dtype == KvDtype::F16;
  shape.values = !c.mla();  // MLA caches the latent and the rope key: one row, no values
  // The sliding-window layers keep only window + max_batch_tokens − 1 positions: the last
  // `window` positions every query of a batch attends to, while the batch writes its own
  // (check_batch refuses a position that reaches further back). A contiguous cache keeps them
  // as a ring in the sequence's block, a paged one in its window pool.
  if (!c.layer_is_sliding.empty()) {
    shape.ring_layers = c.layer_is_sliding;
    shape.ring_rows = static_cast<uint32_t>(
        std::min<uint64_t>(c.sliding_window + options.max_batch_tokens - 1, options.context_length));
    shape.window = static_cast<uint32_t>(std::min<uint64_t>(c.sliding_window, options.context_length));
    shape.batch_tokens = options.max_batch_tokens;
  }
  KvCacheShape estimate = shape;  // every layer's storage, wherever it lives
  estimate.layers = static_cast<uint32_t>(c.layer_count);
  if (options.kv_block_tokens && options.kv_budget_bytes) {
    // A byte budget: the window pool (fixed by the shape) first, then as many main blocks as fit.
    const double window_bytes = KvCache::window_block_bytes_of(estimate) * KvCache::window_blocks_of(estimate);
    const double block_bytes = KvCache::main_block_bytes_of(estimate);
    const double budget = static_cast<double>(options.kv_budget_bytes);
    if (block_bytes <= 0 || budget < window_bytes + block_bytes)
      return invalid(strprintf("kv_budget_bytes %llu holds no KV block: one block of %u tokens is %.0f bytes%s; raise "
                               "the budget",
                               static_cast<unsigned long long>(options.kv_budget_bytes), options.kv_block_tokens,
                               block_bytes,
                               window_bytes > 0
                                   ? strprintf(", after the sliding-window layers' pool of %.0f bytes (max_sequences "
                                               "x (window + max_batch_tokens))",
                                               window_bytes)
                                         .c_str()
                                   : ""));
    const double blocks = std::floor((budget - window_bytes) / block_bytes);
    if (blocks > kMaxKvBlocks)
      return invalid(strprintf("kv_budget_bytes %llu is %.0f KV blocks, more than the %u a pool holds; lower it",
                               static_cast<unsigned long long>(options.kv_budget_bytes), blocks, kMaxKvBlocks));
    options.kv_blocks = static_cast<uint32_t>(blocks);
    shape.block_count = estimate.block_count = options.kv_blocks;
  }
  const double kv_bytes = KvCache::storage_bytes(estimate);
  // Two bounds, one check: a fixed 256 GiB, and the machine's memory (the cache is zero-filled at
  // creation, so a cache beyond it would not fail cleanly: it would swap or draw the OOM killer).
  const double kGiB = 1ull << 30, fixed_bound = 256.0 * kGiB;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  const double memory = pages > 0 && page_size > 0 ? static_cast<double>(pages) * static_cast<double>(page_size) : 0.0;
  const bool memory_bound = memory > 0 && memory < fixed_bound;
  if (on_device && options.kv_block_tokens)
    return unsupported("the CUDA backend does not implement the paged KV cache yet (kv_block_tokens; the serving "
                       "engine uses it): use a contiguous cache, or the CPU");
  // A CUDA session's cache lives in device memory (the module checks the device's budget).
  if (!on_device && kv_bytes > (memory_bound ? memory : fixed_bound))
    return invalid(strprintf("the KV cache would need %.1f GiB (sequences × layers × context × kv width, a "
                             "sliding-window layer's ring instead of the context)%s; lower "
                             "context_length or max_sequences",
                             kv_bytes / kGiB,
                             memory_bound ? strprintf(" but this machine has %.1f GiB of memory", memory / kGiB).c_str() : ""));

  std::unique_ptr<Session> s(new Session(model, options));
  s->kernels_ = &kernels::kernel_table(options.force_scalar ? kernels::Isa::Scalar : std::min(options.max_isa, kernels::best_isa()));
  if (options.kv_dtype != KvDtype::F32 && options.kv_dtype != KvDtype::F16)
    return invalid("kv_dtype must be F32 or F16");
  util::ThreadPoolOptions pool_options;
  // A CUDA session computes nothing on the host threads: one (the caller's) is enough.
  pool_options.thread_count = on_device ? 1 : options.threads;
  pool_options.pin_threads = options.pin_threads;
  // bind:N: the workers run on node N's CPUs (those of them the calling thread may use: an
  // inherited affinity such as numactl --cpunodebind is kept), and forward() runs the calling
  // thread there for the call (util::ScopedThreadCpus): the pool runs a share of every task on it.
  util::ThreadPlacement threads;
  const util::NumaSystem &numa_system = options.numa_system ? *options.numa_system : util::system_numa();
  if (Error e = util::plan_thread_placement(options.numa, numa_system, &threads)) {
    *error = e;
    return nullptr;
  }
  if (!threads.cpus.empty()) {
    pool_options.cpus = threads.cpus;
    s->bound_cpus_ = util::cpu_set_of(threads.cpus);
    s->bound_ = true;
  }
  s->pool_ = util::ThreadPool::create_placed(pool_options, "the session's thread pool (threads option)", error);
  if (!s->pool_) return nullptr;
  s->thread_report_ = threads.description;
  if (pool_options.pin_threads && s->pool_->thread_count() > 1) {
    // Workers are pinned to CPUs 1.. of the set; the caller's share runs on the first one for
    // each call (ScopedThreadCpus in forward()), whichever thread calls, and the caller gets
    // its own CPUs back after it: a service's thread is never left pinned.
    s->bound_cpus_ = util::cpu_set_of({s->pool_->caller_cpu()});
    s->bound_ = true;
    s->thread_report_ += (s->thread_report_.empty() ? "" : "; ") + std::string("threads pinned one per CPU");
  }
  try {
    s->buffers_ = std::make_unique<Buffers>(model, options, s->pool_->thread_count());
    s->kv_ = std::make_unique<KvCache>(shape);
    s->logits_.assign(static_cast<size_t>(options.max_logit_rows) * c.vocab_size, 0.0f);
  } catch (const std::bad_alloc &) {
    *error = make_error(ErrorKind::OutOfMemory,
                        strprintf("out of memory for the session's buffers (the KV cache alone is %.1f GiB for "
                                  "context_length %u × %u sequences); lower context_length or max_sequences",
                                  kv_bytes / kGiB, options.context_length, options.max_sequences));
    return nullptr;
  }
  s->sequence_lengths_.assign(options.max_sequences, 0);
  if (on_device) {
    DeviceSessionOptions d;
    d.device = options.device;
    d.module_path = options.device_module_path;
    d.graphs = options.device_graphs;
    d.context_length = options.context_length;
    d.max_sequences = options.max_sequences;
    d.max_batch_tokens = options.max_batch_tokens;
    d.max_logit_rows = options.max_logit_rows;
    d.kv_f16 = options.kv_dtype == KvDtype::F16;
    s->device_ = DeviceSession::create(model, d, s->buffers_->rope_inv_freq.data(), error);
    if (!s->device_) return nullptr;
    s->device_entries_.resize(options.max_batch_tokens);
  }
  return s;
}

void Session::reset_sequence(uint32_t sequence) {
  if (sequence >= sequence_lengths_.size()) return;
  sequence_lengths_[sequence] = 0;
  kv_->release(sequence);
}

void Session::reset_all() {
  for (uint32_t s = 0; s < sequence_lengths_.size(); ++s) reset_sequence(s);
}

uint32_t Session::attach_prefix(uint32_t sequence, const int32_t *tokens, size_t count) {
  if (sequence >= sequence_lengths_.size() || sequence_lengths_[sequence] != 0) return 0;
  const uint32_t covered = kv_->attach_prefix(sequence, tokens, count);
  sequence_lengths_[sequence] = covered;
  return covered;
}

Error Session::check_batch(const BatchEntry *entries, size_t count) const {
  const model::ModelConfig &c = model_.config();
  if (count == 0) return make_error(ErrorKind::InvalidArgument, "empty batch: give at least one token");
  if (count > options_.max_batch_tokens)
    return make_error(ErrorKind::InvalidArgument,
                      strprintf("batch of %zu tokens exceeds the session's max_batch_tokens %u; split it or create "
                                "the session with a larger max_batch_tokens",
                                count, options_.max_batch_tokens));
  size_t wanted = 0;
  // Sequence lengths as the batch extends them, entry by entry (a batch may hold a prefill).
  std::vector<uint32_t> &lengths = buffers_->scratch_lengths;
  std::vector<uint32_t> &last = buffers_->scratch_last_position;  // last position per sequence in this batch
  std::vector<uint32_t> &first = buffers_->scratch_first_position;  // its first position (valid where last is)
  std::copy(sequence_lengths_.begin(), sequence_lengths_.end(), lengths.begin());
  std::fill(last.begin(), last.end(), kNoPosition);
  for (size_t i = 0; i < count; ++i) {
    const BatchEntry &e = entries[i];
    if (e.sequence >= options_.max_sequences)
      return make_error(ErrorKind::InvalidArgument, strprintf("entry %zu: sequence %u, but the session has %u slots", i,
                                                              e.sequence, options_.max_sequences));
    if (e.token < 0 || static_cast<uint64_t>(e.token) >= c.vocab_size)
      return make_error(ErrorKind::InvalidArgument, strprintf("entry %zu: token id %d is outside the vocabulary "
                                                              "(0..%llu)",
                                                              i, e.token, static_cast<unsigned long long>(c.vocab_size - 1)));
    // A gap first: a position far beyond the context is a gap, not a full sequence.
    if (e.position > lengths[e.sequence])
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("entry %zu: position %u of sequence %u leaves a gap (the sequence has %u tokens)", i,
                                  e.position, e.sequence, lengths[e.sequence]));
    if (e.position >= options_.context_length)
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("entry %zu: position %u is beyond the context length %u; the sequence is full "
                                  "(create the session with a larger context_length)",
                                  i, e.position, options_.context_length));
    if (e.position >= kv_->capacity(e.sequence))
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("entry %zu: position %u of sequence %u has no KV block (its blocks hold %u "
                                  "positions); reserve blocks first",
                                  i, e.position, e.sequence, kv_->capacity(e.sequence)));
    if (last[e.sequence] != kNoPosition && e.position != last[e.sequence] + 1)
      return make_error(ErrorKind::InvalidArgument,
                        strprintf("entry %zu: position %u of sequence %u does not follow its previous entry in the "
                                  "batch (position %u); a sequence's entries must be consecutive positions",
                                  i, e.position, e.sequence, last[e.sequence]));
    if (last[e.sequence] == kNoPosition) first[e.sequence] = e.position;
    last[e.sequence] = e.position;
    lengths[e.sequence] = std::max(lengths[e.sequence], e.position + 1);
    wanted += e.want_logits ? 1 : 0;
  }
  // Sliding-window layers keeping a ring (KvCache::ring_rows): after the batch has written its
  // positions, the ring must still hold every position its first query of each sequence attends
  // to. Appending always fits (the ring is window + max_batch_tokens − 1 long); going back to an
  // earlier position fits within max_batch_tokens positions.
  if (const uint32_t ring = kv_->ring_rows()) {
    const uint64_t window = c.sliding_window;
    for (size_t i = 0; i < count; ++i) {
      const BatchEntry &e = entries[i];
      if (e.position != first[e.sequence]) continue;
      const uint64_t needed = e.position + 1 > window ? e.position + 1 - window : 0;
      // (A paged cache's window blocks may start later still: after a prefix hit they begin
      // `window` positions before it.)
      const uint64_t kept = std::max<uint64_t>(lengths[e.sequence] > ring ? lengths[e.sequence] - ring : 0,
                                               std::min(kv_->window_start(e.sequence), e.position));
      if (needed < kept)
        return make_error(ErrorKind::InvalidArgument,
                          strprintf("entry %zu: position %u of sequence %u goes back further than the sliding-window "
                                    "layers keep: they hold the last %u positions (window %llu + max_batch_tokens %u "
                                    "- 1) and the sequence has %u, so position %llu is gone; reset the sequence and "
                                    "prefill it again (or create the session with a larger max_batch_tokens)",
                                    i, e.position, e.sequence, ring, static_cast<unsigned long long>(window),
                                    options_.max_batch_tokens, sequence_lengths_[e.sequence],
                                    static_cast<unsigned long long>(needed)));
    }
  }
  if (wanted > options_.max_logit_rows)
    return make_error(ErrorKind::InvalidArgument, strprintf("%zu entries want logits, the session holds %u rows "
                                                            "(max_logit_rows)",
                                                            wanted, options_.max_logit_rows));
  return {};
}

Error Session::forward(const BatchEntry *entries, size_t count) {
  if (Error e = model_.image().check_unchanged()) return e;  // before any weight is read (issue 18, item 4)
  if (Error e = check_batch(entries, count)) return e;
  logit_rows_ = 0;  // until this pass has produced its logits
  const util::ScopedThreadCpus on_node(bound_ ? &bound_cpus_ : nullptr);  // bind:N or pinned: the caller's share there
  const model::ModelConfig &c = model_.config();
  Buffers &b = *buffers_;
  const size_t H = c.hidden_size;
  ++stats_.forward_calls;
  stats_.tokens += count;
  if (device_) return forward_on_device(entries, count);

  // Window blocks (a paged cache's sliding-window layers) for the positions this pass writes.
  if (kv_->window_block_count()) {
    const std::vector<uint32_t> &first = b.scratch_first_position, &last = b.scratch_last_position;
    for (uint32_t s = 0; s < options_.max_sequences; ++s)
      if (last[s] != kNoPosition) kv_->take_window(s, first[s], last[s] + 1);
  }

  // 1. Token embeddings into the residual stream x [count, hidden].
  embed(entries, count);
  if (Error e = guard_non_finite(b.x.data(), count, H, {"token_embd", kNoLayer, true}, entries)) return e;
  prepare_rope(entries, count);

  for (uint32_t l = 0; l < c.layer_count; ++l) {
    // 2. Attention block: x += Attention(RMSNorm(x)) (writes this batch's K/V into the cache).
    if (Error e = attention(l, entries, count)) return e;
    // 3. FFN block: x += FFN(RMSNorm(x)); the FFN is the MoE block or a dense SwiGLU.
    {
      StageTimer timer(stats_, Stage::Experts);
      const float *norm = model_.layers()[l].ffn_norm.data;
      pool_->parallel_for(count, [&](size_t t, size_t) {
        kernels_->rmsnorm(&b.xn[t * H], &b.x[t * H], norm, static_cast<float>(c.rms_norm_eps), H);
      });
    }
    if (Error e = ffn(l, count, nullptr, b.xn.data(), b.ffn_out.data(), entries)) return e;
    StageTimer timer(stats_, Stage::Merge);
    pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->add(&b.x[t * H], &b.x[t * H], &b.ffn_out[t * H], H); });
  }

  // 4. Final norm and LM head for the entries that want logits.
  size_t rows = 0;
  for (size_t i = 0; i < count; ++i)
    if (entries[i].want_logits) b.logit_sources[rows++] = static_cast<uint32_t>(i);
  if (rows) {
    if (Error e = lm_head(entries, rows)) return e;
  }
  logit_rows_ = rows;
  // 5. Only a pass that succeeded extends its sequences (a failed one leaves them as they were).
  for (size_t i = 0; i < count; ++i)
    sequence_lengths_[entries[i].sequence] = std::max(sequence_lengths_[entries[i].sequence], entries[i].position + 1);
  if (kv_->window_block_count())
    for (uint32_t s = 0; s < options_.max_sequences; ++s)
      if (b.scratch_last_position[s] != kNoPosition) kv_->trim_window(s, sequence_lengths_[s]);
  return {};
}

Error Session::forward_on_device(const BatchEntry *entries, size_t count) {
  if (expert_hook_.fn)
    return make_error(ErrorKind::Unsupported, "the CUDA backend does not implement the per-expert callback yet "
                                              "(colibri_session_set_expert_fn): use a CPU session");
  for (size_t i = 0; i < count; ++i)
    device_entries_[i] = {entries[i].sequence, entries[i].position, entries[i].token, entries[i].want_logits};
  // The stage times of a device pass are device time between CUDA events placed between the
  // stages' kernels (the same stages as on the CPU).
  static_assert(static_cast<uint32_t>(Stage::Count) == COLIBRI_DEVICE_STAGE_COUNT &&
                static_cast<uint32_t>(Stage::Router) == COLIBRI_DEVICE_STAGE_ROUTER &&
                static_cast<uint32_t>(Stage::LmHead) == COLIBRI_DEVICE_STAGE_LM_HEAD);
  size_t rows = 0;
  if (Error e = device_->forward(device_entries_.data(), count, logits_.data(), &rows, stats_.stage_ns)) return e;
  logit_rows_ = rows;
  // Every token computes top_k experts in each MoE layer, as on the CPU. (The weight bytes the
  // device read are not counted: which experts ran is known on the device only.)
  for (const model::LayerWeights &w : model_.layers())
    if (w.is_moe) stats_.expert_activations += count * model_.config().top_k;
  for (size_t i = 0; i < count; ++i)
    sequence_lengths_[entries[i].sequence] = std::max(sequence_lengths_[entries[i].sequence], entries[i].position + 1);
  return {};
}

void Session::embed(const BatchEntry *entries, size_t count) {
  StageTimer timer(stats_, Stage::Embedding);
  const model::WeightMatrix &e = model_.token_embedding();
  const size_t H = model_.config().hidden_size;
  float *x = buffers_->x.data();
  pool_->parallel_for(count, [&](size_t t, size_t) {
    const unsigned char *row = e.data + static_cast<uint64_t>(entries[t].token) * e.row_bytes;
    float *out = x + t * H;
    switch (e.dtype) {
      case kernels::DType::F32: std::memcpy(out, row, H * 4); break;
      case kernels::DType::F16: kernels_->f16_to_f32(reinterpret_cast<const uint16_t *>(row), out, H); break;
      case kernels::DType::BF16: kernels_->bf16_to_f32(reinterpret_cast<const uint16_t *>(row), out, H); break;
      default:
        image::dequantize_row(static_cast<image::DType>(e.dtype), e.group_size, row, H, out);
        break;
    }
  });
  stats_.weight_bytes_read += count * e.row_bytes;
}

void Session::matmul(const model::WeightMatrix &w, const float *x, size_t count, float *y, size_t y_stride) {
  const MatmulJob job{&w, y, y_stride};
  matmuls(&job, 1, x, count);
}

void Session::matmuls(const MatmulJob *jobs, size_t job_count, const float *x, size_t count) {
  // The jobs' rows, one matrix after the other, form one row space that the call cuts into
  // tasks of equal weight bytes (equal_bytes_cut; cuts rounded to kMatmulRowAlign rows inside
  // a matrix), so the pool's static partition hands every thread the same bytes.
  // Cutting each matrix into its own blocks gave blocks of unequal size (q/k/v: 6 blocks of
  // 342 KiB and 4 of 256 KiB for 2 threads), and the thread with the smaller half then waited
  // for the other's last block.
  size_t total_rows = 0;
  for (size_t j = 0; j < job_count; ++j) {
    total_rows += jobs[j].w->rows;
    stats_.weight_bytes_read += jobs[j].w->matrix_bytes;
  }
  // At most one task per kMatmulRowAlign rows: a router of 8 rows is one task (run by the
  // calling thread), not 8 tasks of which 7 are empty.
  const size_t task_count = std::max<size_t>(
      1, std::min(pool_->thread_count() * kMatmulTasksPerThread, (total_rows + kMatmulRowAlign - 1) / kMatmulRowAlign));
  auto shape = [&](size_t j, uint64_t *rows, uint64_t *row_bytes) {
    *rows = jobs[j].w->rows;
    *row_bytes = jobs[j].w->row_bytes;
  };
  // Weights of the q8-activation dtypes: quantise the input once for the call (with the
  // activation group of the first such matrix) instead of once per task in the kernel;
  // bitwise the same products.
  uint32_t q8_group = 0;
  for (size_t j = 0; j < job_count && !q8_group; ++j)
    if (kernels::takes_q8_activations(jobs[j].w->dtype))
      q8_group = kernels::activation_group_size(jobs[j].w->dtype, jobs[j].w->group_size);
  const size_t cols = jobs[0].w->cols;
  const size_t q8_row = q8_group ? kernels::row_bytes(kernels::DType::Q8, q8_group, cols) : 0;
  unsigned char *x_q8 = buffers_->matmul_q8.data();
  if (q8_group)
    pool_->parallel_for(count, [&](size_t t, size_t) { kernels_->quantize_row_q8(x + t * cols, cols, q8_group, x_q8 + t * q8_row); });
  auto decode_driver = [&](kernels::DType dtype) { return count <= kernels::decode_driver_max_tokens(kernels_->isa, dtype); };
  pool_->parallel_for(task_count, [&](size_t i, size_t) {
    const RowPosition first = equal_bytes_cut(shape, job_count, i, task_count, kMatmulRowAlign);
    const RowPosition last = equal_bytes_cut(shape, job_count, i + 1, task_count, kMatmulRowAlign);
    for (size_t j = first.matrix; j <= last.matrix && j < job_count; ++j) {
      const MatmulJob &job = jobs[j];
      const model::WeightMatrix &w = *job.w;
      const size_t begin = j == first.matrix ? first.row : 0, end = j == last.matrix ? last.row : w.rows;
      if (begin >= end) continue;
      const bool decode = decode_driver(w.dtype);
      if (kernels::takes_q8_activations(w.dtype) && kernels::activation_group_size(w.dtype, w.group_size) == q8_group)
        (decode ? kernels_->matmul_rows_q8 : kernels_->gemm_rows_q8)(w.data, w.dtype, w.group_size, w.cols, begin, end, x_q8,
                                                                     count, job.y, job.y_stride);
      else
        (decode ? kernels_->matmul_rows : kernels_->gemm_rows)(w.data, w.dtype, w.group_size, w.cols, begin, end, x, count,
                                                               job.y, job.y_stride);
    }
  });
}

Error Session::lm_head(const BatchEntry *entries, size_t rows) {
  StageTimer timer(stats_, Stage::LmHead);
  const model::ModelConfig &c = model_.config();
  Buffers &b = *buffers_;
  const size_t H = c.hidden_size;
  const float *norm = model_.output_norm().data;
  pool_->parallel_for(rows, [&](size_t r, size_t) {
    kernels_->rmsnorm(&b.xn[r * H], &b.x[b.logit_sources[r] * H], norm, static_cast<float>(c.rms_norm_eps), H);
  });
  // The residual stream is finite here (every block's output was checked), so a non-finite
  // normed row comes from the final norm's weights; a non-finite logit from the LM head's.
  if (Error e = guard_non_finite(b.xn.data(), rows, H, {"output_norm", kNoLayer, false}, entries, b.logit_sources.data()))
    return e;
  matmul(model_.output(), b.xn.data(), rows, logits_.data(), c.vocab_size);
  return guard_non_finite(logits_.data(), rows, c.vocab_size, {"logits", kNoLayer, false}, entries, b.logit_sources.data());
}

namespace {

// True when every value of row[0, n) is finite: one pass that ORs a flag per value (a value
// is NaN or an infinity exactly when its exponent bits are all ones), with no early exit,
// so the compiler vectorises it (the checked rows are in cache: they were just written).
bool row_is_finite(const float *row, size_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &row[i], sizeof bits);
    non_finite |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return non_finite == 0;
}

}  // namespace

Error Session::guard_non_finite(float *rows, size_t count, size_t width, const GuardStage &stage,
                                const BatchEntry *entries, const uint32_t *sources) {
  for (size_t t = 0; t < count; ++t) {
    float *row = rows + t * width;
    if (row_is_finite(row, width)) continue;
    if (options_.non_finite == NonFinitePolicy::Error || !stage.zeroable) {
      const std::string where = stage.layer == kNoLayer ? std::string(stage.name)
                                                        : strprintf("%s of layer %lld", stage.name, static_cast<long long>(stage.layer));
      const BatchEntry *entry = entries ? &entries[sources ? sources[t] : t] : nullptr;
      const std::string at = entry ? strprintf("at position %u of sequence %u", entry->position, entry->sequence)
                                   : strprintf("in batch row %zu", t);
      const std::string row_note = entry ? strprintf("; batch row %zu", t) : std::string();
      // Past the last layer, the rows are the logits or what they are computed from.
      return make_error(ErrorKind::NonFinite,
                        strprintf("%s not finite %s (stage: %s%s): a NaN or Inf came out of this stage, so the input "
                                  "or the weights it reads are not finite. Check the model with colibri-model verify "
                                  "--deep%s",
                                  stage.zeroable ? "hidden states are" : "logits are", at.c_str(), where.c_str(),
                                  row_note.c_str(),
                                  stage.zeroable ? ", or set the non-finite policy to 'zero' to zero such rows and count them"
                                                 : " (the non-finite policy 'zero' does not apply here: a zeroed row would "
                                                   "make every token equally likely)"));
    }
    std::fill(row, row + width, 0.0f);
    ++stats_.non_finite_rows;
  }
  return {};
}

Error Session::moe_layer(uint32_t layer, const float *hidden, size_t count, const Route *routes, float *out) {
  if (Error e = model_.image().check_unchanged()) return e;  // before any weight is read (issue 18, item 4)
  const model::ModelConfig &c = model_.config();
  if (layer >= c.layer_count)
    return make_error(ErrorKind::InvalidArgument, strprintf("layer %u does not exist (the model has %llu layers)", layer,
                                                            static_cast<unsigned long long>(c.layer_count)));
  if (!model_.layers()[layer].is_moe)
    return make_error(ErrorKind::InvalidArgument, strprintf("layer %u is a dense layer, not an MoE layer", layer));
  if (count == 0 || count > options_.max_batch_tokens)
    return make_error(ErrorKind::InvalidArgument, strprintf("%zu tokens: give 1..%u (the session's max_batch_tokens)",
                                                            count, options_.max_batch_tokens));
  if (!hidden || !out) return make_error(ErrorKind::InvalidArgument, "hidden and out must not be null");
  if (device_)
    return make_error(ErrorKind::Unsupported, "the CUDA backend does not implement the layer-level MoE call yet "
                                              "(colibri_session_moe_layer): use a CPU session");
  if (routes) {
    for (size_t i = 0; i < count * c.top_k; ++i)
      if (routes[i].expert < 0 || static_cast<uint64_t>(routes[i].expert) >= c.expert_count || !std::isfinite(routes[i].weight))
        return make_error(ErrorKind::InvalidArgument,
                          strprintf("route %zu (token %zu): expert %d / weight %g is invalid (experts 0..%llu, finite "
                                    "weights)",
                                    i % c.top_k, i / c.top_k, routes[i].expert, static_cast<double>(routes[i].weight),
                                    static_cast<unsigned long long>(c.expert_count - 1)));
  }
  float *input = buffers_->xn.data();
  std::memcpy(input, hidden, count * c.hidden_size * sizeof(float));
  const util::ScopedThreadCpus on_node(bound_ ? &bound_cpus_ : nullptr);  // bind:N or pinned: the caller's share there
  return ffn(layer, count, routes, input, out, nullptr);
}

}  // namespace colibri::runtime
