// kernels/cuda/routing_map.h — the serial parts of the device routing, as plain C++ that the
// CUDA kernels (router.cu) and the host unit tests (tests/unit/cuda_routing_map_test.cpp)
// compile from the same source: the candidate order of the top-k selection, and the grouping
// of a chunk's (token, slot) pairs by expert. No CUDA header needed.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define COLIBRI_HOST_DEVICE __host__ __device__
#else
#define COLIBRI_HOST_DEVICE
#endif

namespace colibri::cuda {

// True when candidate (p, e) beats (q, f) in the top-k selection: the higher probability, and on
// a tie the lower expert index (runtime/router.cpp). e, f < 0: no candidate (always loses).
COLIBRI_HOST_DEVICE inline bool routing_better(float p, int32_t e, float q, int32_t f) {
  if (e < 0) return false;
  if (f < 0) return true;
  return p > q || (p == q && e < f);
}

// Groups pairs 0..pairs-1 (pair i chose expert ids[i]) by expert: pair[] lists them sorted by
// expert, a group's pairs in ascending pair order (a stable insertion sort: pairs is tokens ·
// top_k, at most 8 · top_k); expert[g], offset[g] .. offset[g + 1] describe group g in ascending
// expert order. Returns the number of groups.
COLIBRI_HOST_DEVICE inline uint32_t group_pairs_by_expert(const int32_t *ids, uint32_t pairs, uint32_t *expert,
                                                        uint32_t *offset, uint32_t *pair) {
  for (uint32_t i = 0; i < pairs; ++i) {
    uint32_t j = i;
    while (j > 0 && ids[pair[j - 1]] > ids[i]) {
      pair[j] = pair[j - 1];
      --j;
    }
    pair[j] = i;
  }
  uint32_t groups = 0;
  for (uint32_t i = 0; i < pairs; ++i) {
    const uint32_t e = static_cast<uint32_t>(ids[pair[i]]);
    if (groups == 0 || expert[groups - 1] != e) {
      expert[groups] = e;
      offset[groups] = i;
      ++groups;
    }
  }
  offset[groups] = pairs;
  return groups;
}

}  // namespace colibri::cuda
