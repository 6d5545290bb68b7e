// core/runtime/device.h — a session's device (cpu, cuda:N) and the CUDA backend seen from the
// engine: loading the module libcolibri_cuda.so at run time (dlopen, only when a session asks
// for CUDA) and one device context per session behind kernels/cuda/device_api.h
// (docs/architecture.md §13).
//
// Global state: none of our own. The module is dlopen'ed on each request (the dynamic loader
// counts references and returns the same handle) and never dlclosed, like libcolibri itself
// (-z nodelete): the CUDA runtime keeps threads and state that must not lose their code.
// Thread safety: DeviceSession as the session (one thread at a time); load_cuda_module is
// thread-safe (dlopen is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/cuda/device_api.h"
#include "model/model.h"
#include "util/error.h"

namespace colibri::runtime {

enum class DeviceKind : uint32_t { Cpu = 0, Cuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  uint32_t index = 0;  // cuda:N
};

// The file name of the module, and whether this build produced one (COLIBRI_CUDA).
const char *cuda_module_name();
bool cuda_module_built();

// Loads the CUDA module: module_path if not empty (tests name the build's file), else the file
// next to the object that holds this code (libcolibri.so, or a test executable), else the
// loader's search path. Unsupported, message "no CUDA device: ..." naming what is missing.
Error load_cuda_module(const std::string &module_path, const colibri_device_api **api);

struct DeviceSessionOptions {
  Device device;
  std::string module_path;   // empty: next to libcolibri
  bool graphs = true;        // capture and replay the one-token decode step
  uint32_t context_length = 0, max_sequences = 0, max_batch_tokens = 0, max_logit_rows = 0;
  bool kv_f16 = false;
};

class DeviceSession {
 public:
  // Probes the device, checks the model against what the backend implements, checks the VRAM
  // budget and uploads the weights. inv_freq: the RoPE inverse frequencies [head_dim / 2].
  static std::unique_ptr<DeviceSession> create(const model::Model &model, const DeviceSessionOptions &options,
                                               const float *inv_freq, Error *error);
  ~DeviceSession();
  DeviceSession(const DeviceSession &) = delete;
  DeviceSession &operator=(const DeviceSession &) = delete;

  // entries were checked by the session; logits [max_logit_rows, vocab]. Adds the device time
  // of each stage (CUDA events) to stage_ns[COLIBRI_DEVICE_STAGE_COUNT].
  Error forward(const colibri_device_entry *entries, size_t count, float *logits, size_t *logit_rows, uint64_t *stage_ns);
  colibri_device_context_info info() const;
  // "cuda:N".
  const std::string &name() const { return name_; }

 private:
  DeviceSession() = default;
  const colibri_device_api *api_ = nullptr;
  void *context_ = nullptr;
  std::string name_;
};

}  // namespace colibri::runtime
