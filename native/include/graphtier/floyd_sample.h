// Floyd's algorithm over counter-based draws: the one choice of k distinct neighbours out of d that
// the homogeneous and the typed CPU samplers share (their twins in Python and CUDA follow it too).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "graphtier/counter_rng.h"

namespace graphtier {

constexpr int64_t kLinearScanK = 32;  // Floyd membership by linear scan up to this fanout

// k distinct offsets in [0, d) into `chosen`, sorted ascending, from the draw stream `key`.
// `marks` is a per-thread scratch bitmap (all zero on entry and exit) used when k is large.
inline void floyd_offsets(uint64_t key, int64_t d, int64_t k, int64_t* chosen, std::vector<uint8_t>& marks) {
  const bool scan = k <= kLinearScanK;
  if (!scan && static_cast<int64_t>(marks.size()) < d) marks.resize(d, 0);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = d - k + i;
    int64_t t = uniform_below(draw(key, static_cast<uint64_t>(i)), j + 1);
    bool taken = false;
    if (scan) {
      for (int64_t q = 0; q < i; ++q) taken |= (chosen[q] == t);
    } else {
      taken = marks[t] != 0;
    }
    if (taken) t = j;
    chosen[i] = t;
    if (!scan) marks[t] = 1;
  }
  if (!scan) {
    for (int64_t i = 0; i < k; ++i) marks[chosen[i]] = 0;
  }
  if (scan) {  // a few offsets: insertion sort, without std::sort's set-up
    for (int64_t i = 1; i < k; ++i) {
      const int64_t v = chosen[i];
      int64_t q = i - 1;
      for (; q >= 0 && chosen[q] > v; --q) chosen[q + 1] = chosen[q];
      chosen[q + 1] = v;
    }
  } else {
    std::sort(chosen, chosen + k);
  }
}

}  // namespace graphtier
