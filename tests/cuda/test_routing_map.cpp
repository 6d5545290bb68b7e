// tests/cuda/test_routing_map.cpp — the serial routing logic the CUDA kernels compile from
// kernels/cuda/routing_map.h, run on the host (no device needed): the grouping of pairs by
// expert equals the CPU engine's counting sort, and the top-k candidate order is a total
// order whose fold in any order (the kernel reduces across threads, warps and shuffles in an
// order no test can fix) picks what runtime/router.cpp's serial scan picks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/routing_map.h"
#include "runtime/router.h"

using colibri::cuda::group_pairs_by_expert;
using colibri::cuda::routing_better;

TEST_CASE("device grouping by expert = the CPU's counting sort, stable in pair order", "[cuda][routing]") {
  std::mt19937 rng(5);
  for (int round = 0; round < 500; ++round) {
    const uint32_t experts = 1 + rng() % 40, top_k = 1 + rng() % std::min<uint32_t>(experts, 8), tokens = 1 + rng() % 8;
    std::vector<int32_t> ids;
    for (uint32_t t = 0; t < tokens; ++t) {  // k distinct experts per token, as top-k gives
      std::vector<int32_t> all(experts);
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      ids.insert(ids.end(), all.begin(), all.begin() + top_k);
    }
    const uint32_t pairs = tokens * top_k;
    std::vector<uint32_t> expert(pairs), offset(pairs + 1), pair(pairs);
    const uint32_t groups = group_pairs_by_expert(ids.data(), pairs, expert.data(), offset.data(), pair.data());
    // Reference: counting sort (core/runtime/moe.cpp run_experts).
    std::vector<uint32_t> count(experts, 0), expected;
    for (int32_t e : ids) ++count[e];
    uint32_t active = 0;
    for (uint32_t e = 0; e < experts; ++e) {
      if (!count[e]) continue;
      REQUIRE(active < groups);
      CHECK(expert[active] == e);
      CHECK(offset[active + 1] - offset[active] == count[e]);
      ++active;
      for (uint32_t i = 0; i < pairs; ++i)
        if (ids[i] == static_cast<int32_t>(e)) expected.push_back(i);
    }
    CHECK(groups == active);
    CHECK(offset[groups] == pairs);
    CHECK(pair == expected);
    for (uint32_t g = 0; g < groups; ++g)
      for (uint32_t i = offset[g]; i < offset[g + 1]; ++i) CHECK(ids[pair[i]] == static_cast<int32_t>(expert[g]));
  }
}

TEST_CASE("the device top-k candidate order picks the CPU's experts in any reduction order, ties to the lower index",
          "[cuda][routing]") {
  std::mt19937 rng(11);
  for (int round = 0; round < 300; ++round) {
    const size_t experts = 2 + rng() % 64, k = 1 + rng() % std::min<size_t>(experts, 8);
    std::vector<float> p(experts);
    // Few distinct values: many ties.
    for (float &v : p) v = static_cast<float>(rng() % 4) / 8.0f;
    std::vector<int32_t> cpu_ids(k);
    std::vector<float> cpu_weights(k);
    colibri::runtime::select_top_k(p.data(), experts, k, false, cpu_ids.data(), cpu_weights.data());
    std::vector<float> left = p;
    for (size_t slot = 0; slot < k; ++slot) {
      std::vector<int32_t> order(experts);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      float best_p = -1.0f;
      int32_t best_e = -1;
      for (int32_t e : order)  // taken experts are marked -1 and skipped, as in the kernel
        if (left[e] >= 0.0f && routing_better(left[e], e, best_p, best_e)) {
          best_p = left[e];
          best_e = e;
        }
      // A second fold over pairs of partial results (the shuffle tree) gives the same.
      CHECK(best_e == cpu_ids[slot]);
      left[best_e] = -1.0f;
    }
  }
  CHECK_FALSE(routing_better(0.5f, -1, 0.1f, 3));
  CHECK(routing_better(0.1f, 3, 0.5f, -1));
  CHECK(routing_better(0.5f, 2, 0.5f, 7));
  CHECK_FALSE(routing_better(0.5f, 7, 0.5f, 2));
}
