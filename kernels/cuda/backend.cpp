// kernels/cuda/backend.cpp — the CUDA backend module (libcolibri_cuda.so): the function table
// of device_api.h over the kernels of launch.h (docs/architecture.md §13).
//
// A context owns one device allocation (weights, KV cache, activations, carved from one
// arena so that the VRAM budget is checked once, before anything is uploaded), a stream, two
// events for the device time, pinned host buffers (upload staging, step parameters, logits)
// and, after the first one-token decode step, that step captured as a CUDA graph. Every CUDA
// call is checked and becomes a status with a message naming the call and what it was for;
// nothing aborts. No global state: everything lives in the context.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cuda/device_api.h"
#include "kernels/cuda/launch.h"

namespace colibri::cuda {
namespace {

constexpr size_t kArenaAlign = 256;
constexpr size_t kStagingBytes = 32u << 20;  // per half of the double-buffered upload staging
// Left free on the device beyond the plan: the CUDA context, the graph, the allocator's slack.
constexpr uint64_t kDeviceReserveBytes = 512ull << 20;
constexpr uint32_t kMaxChunk = COLIBRI_DEVICE_MAX_CHUNK_TOKENS;
constexpr uint32_t kNoStage = 0xffffffffu;
// Timing events of one context at most (a long prefill harvests them chunk by chunk).
constexpr size_t kMaxMarks = 4096;

int32_t write_message(char *message, size_t size, int32_t status, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
int32_t write_message(char *message, size_t size, int32_t status, const char *format, ...) {
  if (message && size) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, size, format, args);
    va_end(args);
  }
  return status;
}

int32_t cuda_status(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? COLIBRI_DEVICE_ERROR_OUT_OF_MEMORY : COLIBRI_DEVICE_ERROR_DEVICE;
}

// Checks one CUDA call: on failure, returns from the enclosing function with a status and a
// message "<call> (<what>): <CUDA error name>: <CUDA error text>".
#define COLIBRI_CUDA_CHECK(call, what)                                                                          \
  do {                                                                                                          \
    const cudaError_t colibri_e_ = (call);                                                                      \
    if (colibri_e_ != cudaSuccess)                                                                              \
      return write_message(message, message_size, cuda_status(colibri_e_), "%s (%s): %s: %s", #call, what,     \
                           cudaGetErrorName(colibri_e_), cudaGetErrorString(colibri_e_));                       \
  } while (0)

const char *dtype_name(uint32_t dtype) {
  switch (dtype) {
    case 0: return "f32";
    case 1: return "f16";
    case 2: return "bf16";
    case 3: return "q8";
    case 4: return "q4";
    case 5: return "q8f16";
    case 6: return "mxfp4";
  }
  return "unknown";
}

bool dtype_supported(uint32_t dtype) {
  return dtype == COLIBRI_DEVICE_DTYPE_F32 || dtype == COLIBRI_DEVICE_DTYPE_F16 || dtype == COLIBRI_DEVICE_DTYPE_BF16 ||
         dtype == COLIBRI_DEVICE_DTYPE_Q8;
}

// A weight in the arena: offset until the arena exists, then a device pointer.
struct DeviceMatrix {
  size_t offset = 0;
  const unsigned char *data = nullptr;
  uint32_t dtype = 0;
  uint32_t group = 0;  // q8 block size
  uint64_t rows = 0, cols = 0, row_bytes = 0, matrix_bytes = 0;
  bool present = false;
};
struct DeviceVector {
  size_t offset = 0;
  const float *data = nullptr;
  bool present = false;
};

struct DeviceLayer {
  DeviceVector attn_norm, ffn_norm, q_bias, k_bias, v_bias, q_norm, k_norm;
  DeviceMatrix q, k, v, o;
  bool is_moe = false;
  DeviceMatrix router, gate, up, down, shared_gate, shared_up, shared_down, shared_expert_gate;
  DeviceMatrix dense_gate, dense_up, dense_down;
};

// One host range to upload into the arena.
struct Upload {
  const void *host;
  size_t bytes;
  size_t offset;
};

struct Context {
  colibri_device_model model{};  // hyper-parameters (pointers into host memory not used after create)
  colibri_device_session session{};
  cudaDeviceProp properties{};
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  unsigned char *arena = nullptr;
  size_t arena_bytes = 0;
  uint64_t weight_bytes = 0, kv_bytes = 0, buffer_bytes = 0;
  DeviceMatrix embedding, output;
  DeviceVector output_norm, inv_freq;
  std::vector<DeviceLayer> layers;
  // Device buffers (offsets first, then pointers): see plan_buffers.
  struct Buffers {
    float *x, *xn, *q, *k, *v, *attn, *scores, *router_logits, *weights, *h, *y, *gate, *up, *shared_out,
        *shared_logit, *logits;
    unsigned char *x_q8;  // [8, q8 row of the widest input] an input quantised for q8 weights
    unsigned char *h_q8;  // [8 · top_k, q8 row of expert_ffn] the expert activations for q8 down
    int32_t *ids;
    ExpertGroups *groups;
    StepParams *params;  // [chunks]
    void *kv;
  } b{};
  size_t chunks = 0;             // StepParams slots (max_batch_tokens / 8, rounded up)
  uint32_t max_pairs = 0;        // 8 · top_k
  StepParams *params_host = nullptr;  // pinned [chunks]
  float *logits_host = nullptr;       // pinned [max_logit_rows, vocab]
  // Stage timing: events recorded between the stages' kernels, marks[i] closing stage
  // mark_stage[i] (kNoStage: a chunk's start). Harvested after a sync, or when full.
  std::vector<cudaEvent_t> marks;
  std::vector<uint32_t> mark_stage;
  size_t mark_count = 0;
  size_t marks_per_chunk = 0;
  size_t graph_mark_count = 0;  // marks the captured decode step records (indices 0..n-1)
  std::vector<uint32_t> graph_mark_stage;
  bool marks_in_graph = true;   // false when a capture with event-record nodes failed
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graph_exec = nullptr;
  uint64_t graph_launches = 0, eager_steps = 0, graph_kernels = 0;
  double device_ms = 0.0;

  ~Context() {
    // Teardown: errors cannot be reported from here and change nothing for the caller.
    if (stream) (void)cudaSetDevice(static_cast<int>(session.device_index));
    if (graph_exec) (void)cudaGraphExecDestroy(graph_exec);
    if (graph) (void)cudaGraphDestroy(graph);
    if (stream) (void)cudaStreamSynchronize(stream);
    if (arena) (void)cudaFree(arena);
    if (params_host) (void)cudaFreeHost(params_host);
    if (logits_host) (void)cudaFreeHost(logits_host);
    for (cudaEvent_t e : marks)
      if (e) (void)cudaEventDestroy(e);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    if (stream) (void)cudaStreamDestroy(stream);
  }
};

// ---- probe ------------------------------------------------------------------------------------

int32_t probe(uint32_t device_index, char *name, size_t name_size, char *message, size_t message_size) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaErrorInsufficientDriver)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_NO_DEVICE,
                         "no NVIDIA driver, or one older than this build's CUDA runtime %d.%d needs "
                         "(libcuda.so.1 not loadable; cudaGetDeviceCount: %s)",
                         CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, cudaGetErrorString(e));
  if (e == cudaErrorNoDevice)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_NO_DEVICE,
                         "the NVIDIA driver is loaded but reports no device (cudaGetDeviceCount: %s)",
                         cudaGetErrorString(e));
  if (e != cudaSuccess)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_NO_DEVICE, "cudaGetDeviceCount failed: %s: %s",
                         cudaGetErrorName(e), cudaGetErrorString(e));
  if (count <= 0 || device_index >= static_cast<uint32_t>(count))
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_NO_DEVICE,
                         "cuda:%u was asked for, but this machine has %d CUDA device(s)", device_index, count);
  cudaDeviceProp p{};
  COLIBRI_CUDA_CHECK(cudaGetDeviceProperties(&p, static_cast<int>(device_index)), "the device's name");
  if (name && name_size) std::snprintf(name, name_size, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                                       static_cast<double>(p.totalGlobalMem) / (1ull << 30));
  return COLIBRI_DEVICE_OK;
}

// ---- create: checks, plan, budget, upload -------------------------------------------------------

int32_t check_matrix(const colibri_device_matrix &m, const char *what, uint32_t layer, char *message,
                     size_t message_size) {
  if (!m.data) return COLIBRI_DEVICE_OK;
  if (!dtype_supported(m.dtype))
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_UNSUPPORTED,
                         "the CUDA backend does not implement %s weights yet (%s of layer %u is %s); use an f32, f16, "
                         "bf16 or q8 image (colibri-model convert --dtype f16)",
                         dtype_name(m.dtype), what, layer, dtype_name(m.dtype));
  if (m.dtype == COLIBRI_DEVICE_DTYPE_Q8) {
    if ((m.group_size != 32 && m.group_size != 64) || m.cols % m.group_size ||
        m.row_bytes != m.cols / m.group_size * (4 + m.group_size))
      return write_message(message, message_size, COLIBRI_DEVICE_ERROR_UNSUPPORTED,
                           "%s of layer %u: q8 with group size %u (the CUDA backend reads groups of 32 or 64)", what, layer,
                           m.group_size);
  } else if (m.row_bytes != m.cols * (m.dtype == COLIBRI_DEVICE_DTYPE_F32 ? 4u : 2u)) {
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "%s of layer %u: inconsistent shape", what, layer);
  }
  if (m.matrix_bytes != m.rows * m.row_bytes)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "%s of layer %u: inconsistent shape", what, layer);
  return COLIBRI_DEVICE_OK;
}

int32_t check_model(const colibri_device_model &m, const colibri_device_session &s, char *message, size_t message_size) {
  if (m.router_softmax != 1)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_UNSUPPORTED,
                         "the CUDA backend does not implement this router's scoring yet (only softmax)");
  if (m.head_dim == 0 || m.head_dim % 2 || m.kv_head_count == 0 || m.head_count % m.kv_head_count)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "heads/head_dim are inconsistent");
  bool any_moe = false;
  for (uint32_t l = 0; l < m.layer_count; ++l) any_moe = any_moe || m.layers[l].is_moe;
  if (any_moe && (m.top_k == 0 || m.top_k > m.expert_count))
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "top_k %llu is not in 1..experts (%llu)",
                         static_cast<unsigned long long>(m.top_k), static_cast<unsigned long long>(m.expert_count));
  if (m.top_k > 64)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_UNSUPPORTED,
                         "the CUDA backend does not implement top_k above 64 yet (the model has %llu)",
                         static_cast<unsigned long long>(m.top_k));
  if (s.max_sequences == 0 || s.context_length == 0 || s.max_batch_tokens == 0)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "empty session shape");
  if (int32_t st = check_matrix(m.token_embedding, "token_embd", 0, message, message_size)) return st;
  if (int32_t st = check_matrix(m.output, "output", 0, message, message_size)) return st;
  for (uint32_t l = 0; l < m.layer_count; ++l) {
    const colibri_device_layer &w = m.layers[l];
    const std::pair<const colibri_device_matrix *, const char *> all[] = {
        {&w.attn_q, "attn_q"}, {&w.attn_k, "attn_k"}, {&w.attn_v, "attn_v"}, {&w.attn_output, "attn_output"},
        {&w.router, "router"}, {&w.experts_gate, "experts_gate"}, {&w.experts_up, "experts_up"},
        {&w.experts_down, "experts_down"}, {&w.shared_gate, "shared_gate"}, {&w.shared_up, "shared_up"},
        {&w.shared_down, "shared_down"}, {&w.shared_expert_gate, "shared_expert_gate"},
        {&w.dense_gate, "dense_gate"}, {&w.dense_up, "dense_up"}, {&w.dense_down, "dense_down"}};
    for (const auto &[matrix, what] : all)
      if (int32_t st = check_matrix(*matrix, what, l, message, message_size)) return st;
    if (w.is_moe && (w.experts_gate.dtype != w.experts_up.dtype || w.experts_gate.group_size != w.experts_up.group_size))
      return write_message(message, message_size, COLIBRI_DEVICE_ERROR_UNSUPPORTED,
                           "the CUDA backend does not implement gate and up experts of different dtypes yet (layer %u)", l);
  }
  return COLIBRI_DEVICE_OK;
}

// Lays out the arena: weights first (each host range once: a tied LM head is the embedding),
// then the KV cache, then the buffers. Offsets only; pointers after the allocation.
struct Planner {
  size_t end = 0;
  std::vector<Upload> uploads;
  std::unordered_map<const void *, size_t> placed;
  size_t take(size_t bytes) {
    end = (end + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    const size_t at = end;
    end += bytes;
    return at;
  }
  size_t weight(const void *host, size_t bytes) {
    if (auto it = placed.find(host); it != placed.end()) return it->second;
    const size_t at = take(bytes);
    uploads.push_back({host, bytes, at});
    placed.emplace(host, at);
    return at;
  }
  DeviceMatrix matrix(const colibri_device_matrix &m) {
    DeviceMatrix d;
    if (!m.data) return d;
    d.present = true;
    d.dtype = m.dtype;
    d.group = m.group_size;
    d.rows = m.rows;
    d.cols = m.cols;
    d.row_bytes = m.row_bytes;
    d.matrix_bytes = m.matrix_bytes;
    d.offset = weight(m.data, m.matrix_bytes * (m.count ? m.count : 1));
    return d;
  }
  DeviceVector vector(const colibri_device_vector &v) {
    DeviceVector d;
    if (!v.data) return d;
    d.present = true;
    d.offset = weight(v.data, v.size * sizeof(float));
    return d;
  }
};

void resolve(unsigned char *arena, DeviceMatrix &m) {
  if (m.present) m.data = arena + m.offset;
}
void resolve(unsigned char *arena, DeviceVector &v) {
  if (v.present) v.data = reinterpret_cast<const float *>(arena + v.offset);
}

int32_t upload_ranges(Context &c, const std::vector<Upload> &uploads, unsigned char *staging, cudaEvent_t *done,
                      char *message, size_t message_size) {
  int half = 0;
  bool used[2] = {false, false};
  for (const Upload &u : uploads) {
    for (size_t done_bytes = 0; done_bytes < u.bytes; done_bytes += kStagingBytes) {
      const size_t n = std::min(kStagingBytes, u.bytes - done_bytes);
      // A half of the staging is free again once its previous copy has finished.
      if (used[half]) COLIBRI_CUDA_CHECK(cudaEventSynchronize(done[half]), "the weight upload");
      std::memcpy(staging + half * kStagingBytes, static_cast<const unsigned char *>(u.host) + done_bytes, n);
      COLIBRI_CUDA_CHECK(cudaMemcpyAsync(c.arena + u.offset + done_bytes, staging + half * kStagingBytes, n,
                                         cudaMemcpyHostToDevice, c.stream),
                         "the weight upload");
      COLIBRI_CUDA_CHECK(cudaEventRecord(done[half], c.stream), "the weight upload");
      used[half] = true;
      half ^= 1;
    }
  }
  COLIBRI_CUDA_CHECK(cudaStreamSynchronize(c.stream), "the weight upload");
  return COLIBRI_DEVICE_OK;
}

// Uploads every weight once from the host mapping through double-buffered pinned staging.
int32_t upload(Context &c, const std::vector<Upload> &uploads, char *message, size_t message_size) {
  unsigned char *staging = nullptr;
  COLIBRI_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&staging), 2 * kStagingBytes, cudaHostAllocDefault),
                     "pinned staging for the weight upload");
  cudaEvent_t done[2] = {nullptr, nullptr};
  int32_t status = COLIBRI_DEVICE_OK;
  for (cudaEvent_t &e : done) {
    const cudaError_t err = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (err != cudaSuccess && status == COLIBRI_DEVICE_OK)
      status = write_message(message, message_size, cuda_status(err), "cudaEventCreateWithFlags (upload events): %s",
                             cudaGetErrorString(err));
  }
  if (status == COLIBRI_DEVICE_OK) status = upload_ranges(c, uploads, staging, done, message, message_size);
  for (cudaEvent_t e : done)
    if (e) (void)cudaEventDestroy(e);
  (void)cudaFreeHost(staging);
  return status;
}

int32_t context_create_impl(const colibri_device_model *model, const colibri_device_session *session,
                            void **context_out, char *message, size_t message_size) {
  if (!model || !session || !context_out || model->struct_size < sizeof(colibri_device_model) ||
      session->struct_size < sizeof(colibri_device_session))
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "context_create: bad arguments");
  *context_out = nullptr;
  const colibri_device_model &m = *model;
  const colibri_device_session &s = *session;
  if (int32_t st = probe(s.device_index, nullptr, 0, message, message_size)) return st;
  if (int32_t st = check_model(m, s, message, message_size)) return st;
  auto context = std::make_unique<Context>();
  Context &c = *context;
  c.model = m;
  c.session = s;
  COLIBRI_CUDA_CHECK(cudaSetDevice(static_cast<int>(s.device_index)), "selecting the device");
  COLIBRI_CUDA_CHECK(cudaGetDeviceProperties(&c.properties, static_cast<int>(s.device_index)), "the device's properties");
  COLIBRI_CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking), "the session's stream");
  COLIBRI_CUDA_CHECK(cudaEventCreate(&c.start), "timing events");
  COLIBRI_CUDA_CHECK(cudaEventCreate(&c.stop), "timing events");
  // A chunk's marks: its start, the embedding, per layer up to 6 (attention, FFN norm,
  // router, top-k, dispatch, experts, merge: 7 for an MoE layer), the LM head.
  c.marks_per_chunk = 3 + 7 * static_cast<size_t>(m.layer_count);
  const size_t mark_capacity = std::max(c.marks_per_chunk, std::min(kMaxMarks, c.marks_per_chunk * 8));
  c.marks.assign(mark_capacity, nullptr);
  c.mark_stage.assign(mark_capacity, kNoStage);
  for (cudaEvent_t &e : c.marks) COLIBRI_CUDA_CHECK(cudaEventCreate(&e), "stage timing events");

  // Plan: weights, KV cache, buffers.
  Planner plan;
  c.embedding = plan.matrix(m.token_embedding);
  c.output = plan.matrix(m.output);
  c.output_norm = plan.vector(m.output_norm);
  c.inv_freq = plan.vector({m.rope_inv_freq, m.head_dim / 2});
  c.layers.resize(m.layer_count);
  for (uint32_t l = 0; l < m.layer_count; ++l) {
    const colibri_device_layer &w = m.layers[l];
    DeviceLayer &d = c.layers[l];
    d.attn_norm = plan.vector(w.attn_norm);
    d.ffn_norm = plan.vector(w.ffn_norm);
    d.q_bias = plan.vector(w.attn_q_bias);
    d.k_bias = plan.vector(w.attn_k_bias);
    d.v_bias = plan.vector(w.attn_v_bias);
    d.q_norm = plan.vector(w.attn_q_norm);
    d.k_norm = plan.vector(w.attn_k_norm);
    d.q = plan.matrix(w.attn_q);
    d.k = plan.matrix(w.attn_k);
    d.v = plan.matrix(w.attn_v);
    d.o = plan.matrix(w.attn_output);
    d.is_moe = w.is_moe != 0;
    d.router = plan.matrix(w.router);
    d.gate = plan.matrix(w.experts_gate);
    d.up = plan.matrix(w.experts_up);
    d.down = plan.matrix(w.experts_down);
    d.shared_gate = plan.matrix(w.shared_gate);
    d.shared_up = plan.matrix(w.shared_up);
    d.shared_down = plan.matrix(w.shared_down);
    d.shared_expert_gate = plan.matrix(w.shared_expert_gate);
    d.dense_gate = plan.matrix(w.dense_gate);
    d.dense_up = plan.matrix(w.dense_up);
    d.dense_down = plan.matrix(w.dense_down);
  }
  c.weight_bytes = plan.end;
  const uint64_t H = m.hidden_size, Q = m.head_count * m.head_dim, KV = m.kv_head_count * m.head_dim;
  const uint64_t E = m.expert_count, K = m.top_k, V = m.vocab_size, T = kMaxChunk;
  uint64_t ffn_dense = 0;  // widest dense or shared FFN
  for (const DeviceLayer &d : c.layers) {
    if (d.dense_gate.present) ffn_dense = std::max(ffn_dense, d.dense_gate.rows);
    if (d.shared_gate.present) ffn_dense = std::max(ffn_dense, d.shared_gate.rows);
  }
  c.max_pairs = static_cast<uint32_t>(T * K);
  c.chunks = (s.max_batch_tokens + kMaxChunk - 1) / kMaxChunk;
  // The KV cache in double first: a product of the limits could overflow 64 bits.
  const double kv_bytes_wanted = 2.0 * static_cast<double>(m.layer_count) * s.max_sequences * s.context_length *
                                 static_cast<double>(KV) * (s.kv_f16 ? 2 : 4);
  if (kv_bytes_wanted > 1e18)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_OUT_OF_MEMORY,
                         "not enough device memory on cuda:%u: the KV cache alone would need %.3g bytes; lower "
                         "context_length or max_sequences",
                         s.device_index, kv_bytes_wanted);
  const size_t kv_at = plan.take(2ull * m.layer_count * s.max_sequences * s.context_length * KV * (s.kv_f16 ? 2 : 4));
  c.kv_bytes = plan.end - kv_at;
  struct FloatBuffer {
    float **slot;
    uint64_t count;
  };
  const FloatBuffer floats[] = {
      {&c.b.x, T * H}, {&c.b.xn, T * H}, {&c.b.q, T * Q}, {&c.b.k, T * KV}, {&c.b.v, T * KV}, {&c.b.attn, T * Q},
      {&c.b.scores, T * m.head_count * s.context_length}, {&c.b.router_logits, T * std::max<uint64_t>(E, 1)},
      {&c.b.weights, T * std::max<uint64_t>(K, 1)}, {&c.b.h, T * K * m.expert_ffn_size}, {&c.b.y, T * K * H},
      {&c.b.gate, T * std::max<uint64_t>(ffn_dense, 1)}, {&c.b.up, T * std::max<uint64_t>(ffn_dense, 1)},
      {&c.b.shared_out, T * H}, {&c.b.shared_logit, T}, {&c.b.logits, T * V}};
  std::vector<size_t> float_at;
  for (const FloatBuffer &f : floats) float_at.push_back(plan.take(f.count * sizeof(float)));
  // q8 rows are largest with groups of 32 (36 bytes per 32 values).
  const uint64_t widest_input = std::max({H, Q, ffn_dense, m.expert_ffn_size});
  const size_t x_q8_at = plan.take(T * q8_row_bytes(static_cast<uint32_t>(widest_input + 31) / 32 * 32, 32));
  const size_t h_q8_at = plan.take(T * K * q8_row_bytes(static_cast<uint32_t>(m.expert_ffn_size + 31) / 32 * 32, 32));
  const size_t ids_at = plan.take(T * std::max<uint64_t>(K, 1) * sizeof(int32_t));
  const size_t groups_at = plan.take(expert_groups_bytes(std::max<uint32_t>(c.max_pairs, 1)));
  const size_t params_at = plan.take(c.chunks * sizeof(StepParams));
  c.buffer_bytes = plan.end - kv_at - c.kv_bytes;
  c.arena_bytes = plan.end;

  // The VRAM budget, before anything is allocated or uploaded.
  size_t free_bytes = 0, total_bytes = 0;
  COLIBRI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "the device's free memory");
  const double GiB = 1ull << 30;
  if (c.arena_bytes + kDeviceReserveBytes > free_bytes)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_OUT_OF_MEMORY,
                         "not enough device memory on cuda:%u (%s): the session needs %llu bytes (%.2f GiB: weights "
                         "%llu, KV cache %llu, buffers %llu, plus %llu kept free) but %zu bytes (%.2f GiB) of %zu are "
                         "free; lower context_length or max_sequences, or use a smaller image",
                         s.device_index, c.properties.name,
                         static_cast<unsigned long long>(c.arena_bytes + kDeviceReserveBytes),
                         static_cast<double>(c.arena_bytes + kDeviceReserveBytes) / GiB,
                         static_cast<unsigned long long>(c.weight_bytes), static_cast<unsigned long long>(c.kv_bytes),
                         static_cast<unsigned long long>(c.buffer_bytes),
                         static_cast<unsigned long long>(kDeviceReserveBytes), free_bytes,
                         static_cast<double>(free_bytes) / GiB, total_bytes);
  COLIBRI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void **>(&c.arena), c.arena_bytes), "the session's device memory");
  resolve(c.arena, c.embedding);
  resolve(c.arena, c.output);
  resolve(c.arena, c.output_norm);
  resolve(c.arena, c.inv_freq);
  for (DeviceLayer &d : c.layers) {
    for (DeviceVector *v : {&d.attn_norm, &d.ffn_norm, &d.q_bias, &d.k_bias, &d.v_bias, &d.q_norm, &d.k_norm}) resolve(c.arena, *v);
    for (DeviceMatrix *x : {&d.q, &d.k, &d.v, &d.o, &d.router, &d.gate, &d.up, &d.down, &d.shared_gate, &d.shared_up,
                            &d.shared_down, &d.shared_expert_gate, &d.dense_gate, &d.dense_up, &d.dense_down})
      resolve(c.arena, *x);
  }
  c.b.kv = c.arena + kv_at;
  for (size_t i = 0; i < float_at.size(); ++i) *floats[i].slot = reinterpret_cast<float *>(c.arena + float_at[i]);
  c.b.ids = reinterpret_cast<int32_t *>(c.arena + ids_at);
  c.b.x_q8 = c.arena + x_q8_at;
  c.b.h_q8 = c.arena + h_q8_at;
  c.b.groups = reinterpret_cast<ExpertGroups *>(c.arena + groups_at);
  c.b.params = reinterpret_cast<StepParams *>(c.arena + params_at);
  COLIBRI_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&c.params_host), c.chunks * sizeof(StepParams), cudaHostAllocDefault),
                     "pinned step parameters");
  COLIBRI_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&c.logits_host),
                                   std::max<size_t>(s.max_logit_rows, 1) * V * sizeof(float), cudaHostAllocDefault),
                     "pinned logits");
  if (int32_t st = upload(c, plan.uploads, message, message_size)) return st;
  *context_out = context.release();
  return COLIBRI_DEVICE_OK;
}

// ---- the pass ---------------------------------------------------------------------------------

// Records the next timing mark: the time since the previous mark belongs to `stage`.
cudaError_t mark(Context &c, uint32_t stage) {
  if (c.mark_count >= c.marks.size()) return cudaSuccess;  // cannot happen: sized per chunk and harvested
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (!c.marks_in_graph && cudaStreamIsCapturing(c.stream, &capturing) == cudaSuccess &&
      capturing == cudaStreamCaptureStatusActive)
    return cudaSuccess;
  c.mark_stage[c.mark_count] = stage;
  return cudaEventRecord(c.marks[c.mark_count++], c.stream);
}

// After the stream has reached every mark: adds the time between consecutive marks to their
// stages. A pair that cannot be timed adds nothing (timing never fails a pass).
void harvest(Context &c, uint64_t *stage_ns) {
  for (size_t i = 1; i < c.mark_count && stage_ns; ++i) {
    if (c.mark_stage[i] == kNoStage) continue;
    float ms = 0.0f;
    if (cudaEventElapsedTime(&ms, c.marks[i - 1], c.marks[i]) == cudaSuccess && ms > 0.0f)
      stage_ns[c.mark_stage[i]] += static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
  }
  (void)cudaGetLastError();  // an untimed pair leaves no sticky status behind
  c.mark_count = 0;
}

// Enqueues one chunk of `tokens` tokens (parameters at params) on the stream; lm_head: the
// final norm and the logits of every token of the chunk into b.logits.
int32_t enqueue_step(Context &c, const StepParams *params, uint32_t tokens, bool lm_head, char *message,
                     size_t message_size) {
  const colibri_device_model &m = c.model;
  const Context::Buffers &b = c.b;
  const uint32_t H = static_cast<uint32_t>(m.hidden_size), D = static_cast<uint32_t>(m.head_dim);
  const uint32_t heads = static_cast<uint32_t>(m.head_count), kv_heads = static_cast<uint32_t>(m.kv_head_count);
  const uint32_t Q = heads * D, KV = kv_heads * D, K = static_cast<uint32_t>(m.top_k);
  const uint32_t E = static_cast<uint32_t>(m.expert_count), F = static_cast<uint32_t>(m.expert_ffn_size);
  const uint32_t L = static_cast<uint32_t>(m.layer_count), T = tokens;
  const float eps = m.rms_norm_eps;
  cudaStream_t st = c.stream;
  const int kv_f16 = c.session.kv_f16 ? 1 : 0;
  // y (+)= W · x for the chunk; q8 weights first quantise x with their group (as the CPU).
  auto mv = [&](const DeviceMatrix &w, const float *x, uint32_t x_stride, float *y, uint32_t y_stride,
                const DeviceVector *bias, int accumulate) {
    const uint32_t cols = static_cast<uint32_t>(w.cols);
    if (w.dtype == COLIBRI_DEVICE_DTYPE_Q8) {
      if (x_stride != cols) return cudaErrorInvalidValue;  // quantised rows are dense
      if (cudaError_t e = quantize_q8(x, cols, T, w.group, b.x_q8, st)) return e;
    }
    return matvec(w.data, w.dtype, w.group, w.row_bytes, static_cast<uint32_t>(w.rows), cols, x, b.x_q8, x_stride, T, y,
                  y_stride, bias && bias->present ? bias->data : nullptr, accumulate, st);
  };
  COLIBRI_CUDA_CHECK(mark(c, kNoStage), "stage timing");
  // 1. Token embeddings into the residual stream x [T, H].
  COLIBRI_CUDA_CHECK(embed(c.embedding.data, c.embedding.dtype, c.embedding.group, c.embedding.row_bytes, H, params, T, b.x, st),
                     "embedding");
  COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_EMBEDDING), "stage timing");
  for (uint32_t l = 0; l < L; ++l) {
    const DeviceLayer &w = c.layers[l];
    // 2. Attention: RMSNorm, q/k/v (+biases), q/k norms, clip + RoPE + KV store, attention,
    //    output projection added to the residual.
    COLIBRI_CUDA_CHECK(rmsnorm_rows(b.x, b.xn, w.attn_norm.data, eps, H, T, st), "attention norm");
    COLIBRI_CUDA_CHECK(mv(w.q, b.xn, H, b.q, Q, &w.q_bias, 0), "q projection");
    COLIBRI_CUDA_CHECK(mv(w.k, b.xn, H, b.k, KV, &w.k_bias, 0), "k projection");
    COLIBRI_CUDA_CHECK(mv(w.v, b.xn, H, b.v, KV, &w.v_bias, 0), "v projection");
    if (m.qk_norm == COLIBRI_DEVICE_QK_NORM_PER_HEAD) {
      COLIBRI_CUDA_CHECK(rmsnorm_rows(b.q, b.q, w.q_norm.data, eps, D, T * heads, st), "q norm");
      COLIBRI_CUDA_CHECK(rmsnorm_rows(b.k, b.k, w.k_norm.data, eps, D, T * kv_heads, st), "k norm");
    } else if (m.qk_norm == COLIBRI_DEVICE_QK_NORM_FULL) {
      COLIBRI_CUDA_CHECK(rmsnorm_rows(b.q, b.q, w.q_norm.data, eps, Q, T, st), "q norm");
      COLIBRI_CUDA_CHECK(rmsnorm_rows(b.k, b.k, w.k_norm.data, eps, KV, T, st), "k norm");
    }
    COLIBRI_CUDA_CHECK(rope_store_kv(b.q, b.k, b.v, c.inv_freq.data, heads, kv_heads, D, m.clip_qkv, params, T, b.kv,
                                     kv_f16, l, L, c.session.context_length, st),
                       "RoPE and KV store");
    COLIBRI_CUDA_CHECK(attention_decode(b.q, b.kv, kv_f16, l, L, c.session.context_length, heads, kv_heads, D, params,
                                        T, b.scores, b.attn, st),
                       "attention");
    COLIBRI_CUDA_CHECK(mv(w.o, b.attn, Q, b.x, H, nullptr, 1), "attention output projection");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_ATTENTION), "stage timing");
    // 3. FFN: RMSNorm, then the dense SwiGLU or the MoE block, added to the residual.
    COLIBRI_CUDA_CHECK(rmsnorm_rows(b.x, b.xn, w.ffn_norm.data, eps, H, T, st), "FFN norm");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_EXPERTS), "stage timing");  // the CPU counts the FFN norm there too
    if (!w.is_moe) {
      const uint32_t Fd = static_cast<uint32_t>(w.dense_gate.rows);
      COLIBRI_CUDA_CHECK(mv(w.dense_gate, b.xn, H, b.gate, Fd, nullptr, 0), "dense gate");
      COLIBRI_CUDA_CHECK(mv(w.dense_up, b.xn, H, b.up, Fd, nullptr, 0), "dense up");
      COLIBRI_CUDA_CHECK(silu_mul(b.gate, b.up, static_cast<size_t>(T) * Fd, st), "dense SiLU");
      COLIBRI_CUDA_CHECK(mv(w.dense_down, b.gate, Fd, b.x, H, nullptr, 1), "dense down");
      COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_EXPERTS), "stage timing");
      continue;
    }
    // Router → fused softmax/top-k → grouping by expert, all on the device.
    COLIBRI_CUDA_CHECK(mv(w.router, b.xn, H, b.router_logits, E, nullptr, 0), "router");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_ROUTER), "stage timing");
    COLIBRI_CUDA_CHECK(router_softmax_top_k(b.router_logits, E, K, m.norm_topk_prob ? 1 : 0, T, b.ids, b.weights, st),
                       "router softmax/top-k");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_TOP_K), "stage timing");
    COLIBRI_CUDA_CHECK(group_by_expert(b.ids, T * K, c.max_pairs, b.groups, st), "grouping by expert");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_DISPATCH), "stage timing");
    const uint32_t max_groups = std::min(T * K, E);
    if (w.gate.dtype == COLIBRI_DEVICE_DTYPE_Q8)
      COLIBRI_CUDA_CHECK(quantize_q8(b.xn, H, T, w.gate.group, b.x_q8, st), "quantising the experts' input");
    COLIBRI_CUDA_CHECK(experts_gate_up(w.gate.data, w.up.data, w.gate.dtype, w.gate.group, w.gate.row_bytes,
                                       w.gate.matrix_bytes, F, H, K, b.xn, b.x_q8, b.groups, c.max_pairs, max_groups, b.h,
                                       st),
                       "experts gate+up");
    if (w.down.dtype == COLIBRI_DEVICE_DTYPE_Q8)
      COLIBRI_CUDA_CHECK(quantize_q8(b.h, F, T * K, w.down.group, b.h_q8, st), "quantising the experts' activations");
    COLIBRI_CUDA_CHECK(experts_down(w.down.data, w.down.dtype, w.down.group, w.down.row_bytes, w.down.matrix_bytes, H, F,
                                    b.weights, b.h, b.h_q8, b.groups, c.max_pairs, max_groups, b.y, st),
                       "experts down");
    const float *shared = nullptr, *shared_logit = nullptr;
    if (w.shared_gate.present) {
      const uint32_t S = static_cast<uint32_t>(w.shared_gate.rows);
      COLIBRI_CUDA_CHECK(mv(w.shared_gate, b.xn, H, b.gate, S, nullptr, 0), "shared expert gate");
      COLIBRI_CUDA_CHECK(mv(w.shared_up, b.xn, H, b.up, S, nullptr, 0), "shared expert up");
      COLIBRI_CUDA_CHECK(silu_mul(b.gate, b.up, static_cast<size_t>(T) * S, st), "shared expert SiLU");
      COLIBRI_CUDA_CHECK(mv(w.shared_down, b.gate, S, b.shared_out, H, nullptr, 0), "shared expert down");
      shared = b.shared_out;
      if (w.shared_expert_gate.present) {
        COLIBRI_CUDA_CHECK(mv(w.shared_expert_gate, b.xn, H, b.shared_logit, 1, nullptr, 0), "shared expert gate logit");
        shared_logit = b.shared_logit;
      }
    }
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_EXPERTS), "stage timing");
    COLIBRI_CUDA_CHECK(moe_merge(b.x, b.y, K, H, T, shared, shared_logit, st), "MoE merge");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_MERGE), "stage timing");
  }
  // 4. Final norm and LM head.
  if (lm_head) {
    COLIBRI_CUDA_CHECK(rmsnorm_rows(b.x, b.xn, c.output_norm.data, eps, H, T, st), "output norm");
    COLIBRI_CUDA_CHECK(mv(c.output, b.xn, H, b.logits, static_cast<uint32_t>(m.vocab_size), nullptr, 0), "LM head");
    COLIBRI_CUDA_CHECK(mark(c, COLIBRI_DEVICE_STAGE_LM_HEAD), "stage timing");
  }
  return COLIBRI_DEVICE_OK;
}

// One capture of the one-token decode step (with its LM head) into c.graph / c.graph_exec.
int32_t capture_once(Context &c, char *message, size_t message_size) {
  c.mark_count = 0;
  COLIBRI_CUDA_CHECK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal), "capturing the decode graph");
  const int32_t st = enqueue_step(c, &c.b.params[0], 1, true, message, message_size);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(c.stream, &graph);
  if (st != COLIBRI_DEVICE_OK) {
    if (graph) (void)cudaGraphDestroy(graph);
    return st;
  }
  COLIBRI_CUDA_CHECK(end, "capturing the decode graph");
  c.graph = graph;
  COLIBRI_CUDA_CHECK(cudaGraphInstantiate(&c.graph_exec, c.graph, 0), "instantiating the decode graph");
  return COLIBRI_DEVICE_OK;
}

// Captures the decode step once, with its timing marks as event-record nodes; should a capture
// with them fail, captures it again without (the replays then add no stage times).
int32_t capture_decode_graph(Context &c, char *message, size_t message_size) {
  if (capture_once(c, message, message_size) != COLIBRI_DEVICE_OK) {
    if (c.graph) (void)cudaGraphDestroy(c.graph);
    c.graph = nullptr;
    c.graph_exec = nullptr;
    (void)cudaGetLastError();
    if (message && message_size) message[0] = '\0';
    c.marks_in_graph = false;
    if (int32_t st = capture_once(c, message, message_size)) return st;
  }
  // Kernels per decode step: the kernel nodes of the graph (informational: a failure leaves 0).
  size_t nodes = 0;
  if (cudaGraphGetNodes(c.graph, nullptr, &nodes) == cudaSuccess && nodes) {
    std::vector<cudaGraphNode_t> all(nodes);
    if (cudaGraphGetNodes(c.graph, all.data(), &nodes) == cudaSuccess) {
      c.graph_kernels = 0;
      for (cudaGraphNode_t n : all) {
        cudaGraphNodeType type{};
        if (cudaGraphNodeGetType(n, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++c.graph_kernels;
      }
    }
  }
  (void)cudaGetLastError();
  c.graph_mark_count = c.mark_count;
  c.graph_mark_stage.assign(c.mark_stage.begin(), c.mark_stage.begin() + static_cast<long>(c.mark_count));
  return COLIBRI_DEVICE_OK;
}

int32_t forward_impl(Context &c, const colibri_device_entry *entries, size_t count, float *logits, size_t *logit_rows,
                     uint64_t *stage_ns, char *message, size_t message_size) {
  if (!entries || count == 0 || count > c.session.max_batch_tokens || !logit_rows)
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "forward: bad arguments");
  *logit_rows = 0;
  const size_t V = c.model.vocab_size;
  size_t rows = 0;
  for (size_t i = 0; i < count; ++i) rows += entries[i].want_logits ? 1 : 0;
  if (rows > c.session.max_logit_rows || (rows && !logits))
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "forward: %zu logit rows, room for %u", rows,
                         c.session.max_logit_rows);
  COLIBRI_CUDA_CHECK(cudaSetDevice(static_cast<int>(c.session.device_index)), "selecting the device");
  COLIBRI_CUDA_CHECK(cudaEventRecord(c.start, c.stream), "timing");
  c.mark_count = 0;  // marks of a pass that failed earlier are dropped
  size_t row = 0;
  for (size_t first = 0, chunk = 0; first < count; first += kMaxChunk, ++chunk) {
    const uint32_t T = static_cast<uint32_t>(std::min<size_t>(kMaxChunk, count - first));
    StepParams &p = c.params_host[chunk];
    bool want = false;
    for (uint32_t t = 0; t < kMaxChunk; ++t) {
      const colibri_device_entry &e = entries[first + std::min<size_t>(t, T - 1)];
      p.token[t] = e.token;
      p.sequence[t] = e.sequence;
      p.position[t] = e.position;
      want = want || (t < T && e.want_logits);
    }
    if (c.mark_count + c.marks_per_chunk > c.marks.size()) {
      // The timing events are all in flight: wait for them and harvest before reusing them.
      COLIBRI_CUDA_CHECK(cudaStreamSynchronize(c.stream), "the device pass");
      harvest(c, stage_ns);
    }
    COLIBRI_CUDA_CHECK(cudaMemcpyAsync(&c.b.params[chunk], &p, sizeof p, cudaMemcpyHostToDevice, c.stream), "step parameters");
    if (T == 1 && want && c.session.use_graphs && chunk == 0) {
      if (!c.graph_exec)
        if (int32_t st = capture_decode_graph(c, message, message_size)) return st;
      COLIBRI_CUDA_CHECK(cudaGraphLaunch(c.graph_exec, c.stream), "replaying the decode graph");
      // The replay records the marks the capture placed (indices 0..n-1, their stages).
      c.mark_count = c.marks_in_graph ? c.graph_mark_count : 0;
      std::copy(c.graph_mark_stage.begin(), c.graph_mark_stage.begin() + static_cast<long>(c.mark_count), c.mark_stage.begin());
      ++c.graph_launches;
    } else {
      if (int32_t st = enqueue_step(c, &c.b.params[chunk], T, want, message, message_size)) return st;
      ++c.eager_steps;
    }
    for (uint32_t t = 0; t < T; ++t)
      if (entries[first + t].want_logits) {
        COLIBRI_CUDA_CHECK(cudaMemcpyAsync(c.logits_host + row * V, c.b.logits + static_cast<size_t>(t) * V, V * sizeof(float),
                                           cudaMemcpyDeviceToHost, c.stream),
                           "copying the logits back");
        ++row;
      }
  }
  COLIBRI_CUDA_CHECK(cudaEventRecord(c.stop, c.stream), "timing");
  COLIBRI_CUDA_CHECK(cudaStreamSynchronize(c.stream), "the device pass");
  float ms = 0.0f;
  COLIBRI_CUDA_CHECK(cudaEventElapsedTime(&ms, c.start, c.stop), "timing");
  c.device_ms += ms;
  harvest(c, stage_ns);
  for (size_t r = 0; r < rows; ++r) {
    const float *src = c.logits_host + r * V;
    for (size_t i = 0; i < V; ++i)
      if (!std::isfinite(src[i]))
        return write_message(message, message_size, COLIBRI_DEVICE_ERROR_NON_FINITE,
                             "logits are not finite (row %zu, CUDA backend): a NaN or Inf came out of the device pass; "
                             "the CUDA backend does not implement the per-stage non-finite guard yet, so the stage is "
                             "not named: run the same input on the CPU (device cpu) to find it, or check the model with "
                             "colibri-model verify --deep",
                             r);
    std::memcpy(logits + r * V, src, V * sizeof(float));
  }
  *logit_rows = rows;
  return COLIBRI_DEVICE_OK;
}

// ---- the table ----------------------------------------------------------------------------------

int32_t api_probe(uint32_t device_index, char *name, size_t name_size, char *message, size_t message_size) {
  try {
    return probe(device_index, name, name_size, message, message_size);
  } catch (...) {
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_DEVICE, "probe: unexpected exception");
  }
}

int32_t api_context_create(const colibri_device_model *model, const colibri_device_session *session, void **context_out,
                           char *message, size_t message_size) {
  try {
    return context_create_impl(model, session, context_out, message, message_size);
  } catch (const std::bad_alloc &) {
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_OUT_OF_MEMORY, "out of host memory creating the CUDA context");
  } catch (...) {
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_DEVICE, "context_create: unexpected exception");
  }
}

void api_context_free(void *context) { delete static_cast<Context *>(context); }

int32_t api_forward(void *context, const colibri_device_entry *entries, size_t count, float *logits, size_t *logit_rows,
                    uint64_t *stage_ns, char *message, size_t message_size) {
  if (!context) return write_message(message, message_size, COLIBRI_DEVICE_ERROR_INVALID, "forward: no context");
  try {
    return forward_impl(*static_cast<Context *>(context), entries, count, logits, logit_rows, stage_ns, message,
                        message_size);
  } catch (...) {
    return write_message(message, message_size, COLIBRI_DEVICE_ERROR_DEVICE, "forward: unexpected exception");
  }
}

int32_t api_context_info(void *context, colibri_device_context_info *info) {
  if (!context || !info) return COLIBRI_DEVICE_ERROR_INVALID;
  const Context &c = *static_cast<const Context *>(context);
  info->weight_bytes = c.weight_bytes;
  info->kv_cache_bytes = c.kv_bytes;
  info->buffer_bytes = c.buffer_bytes;
  info->graph_launches = c.graph_launches;
  info->eager_steps = c.eager_steps;
  info->graph_kernels = c.graph_kernels;
  info->device_ms = c.device_ms;
  const size_t n = std::min(sizeof info->device_name - 1, strnlen(c.properties.name, sizeof c.properties.name));
  std::memcpy(info->device_name, c.properties.name, n);
  info->device_name[n] = '\0';
  return COLIBRI_DEVICE_OK;
}

constexpr colibri_device_api kApi = {sizeof(colibri_device_api), COLIBRI_DEVICE_API_VERSION, api_probe,
                                     api_context_create, api_context_free, api_forward, api_context_info};

}  // namespace
}  // namespace colibri::cuda

extern "C" __attribute__((visibility("default"))) const colibri_device_api *colibri_device_api_get(uint32_t version) {
  return version == COLIBRI_DEVICE_API_VERSION ? &colibri::cuda::kApi : nullptr;
}
