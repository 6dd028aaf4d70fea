// One PageRank pull over a column range of a symmetric CSC (service/hotness/scores.py):
// out[v] = the sum of share[u] over the sources u of column v, added in the column's order.
//
// The same sums as index_select + segment_reduce, without the gathered array between them:
// that array has one float64 per edge, is written and read back every iteration, and is
// the larger part of the memory traffic once the graph outgrows the caches. Each column is
// summed in order from 0.0, as segment_reduce does, so the bits are the same and do not
// depend on the number of threads.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kLookahead = 64;         // entries ahead whose share is prefetched
constexpr int64_t kEntriesPerTask = 65536;  // work per parallel task, in edges

void check_vector(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 1 && t.is_contiguous(), name,
              " must be a contiguous 1-D CPU tensor");
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
}

}  // namespace

void pull_sum_(at::Tensor& out, const at::Tensor& share, const at::Tensor& offsets,
               const at::Tensor& row) {
  check_vector(out, "out", at::kDouble);
  check_vector(share, "share", at::kDouble);
  check_vector(offsets, "offsets", at::kLong);
  check_vector(row, "row", at::kLong);
  const int64_t width = out.numel(), edges = row.numel();
  TORCH_CHECK(offsets.numel() == width + 1, "offsets has ", offsets.numel(),
              " entries, expected one more than out's ", width);
  const int64_t* off = offsets.data_ptr<int64_t>();
  TORCH_CHECK(off[0] == 0 && off[width] == edges, "offsets must run from 0 to row's ", edges,
              " entries, got ", off[0], "..", off[width]);
  for (int64_t v = 0; v < width; ++v) {
    TORCH_CHECK(off[v] <= off[v + 1], "offsets decrease at column ", v);
  }
  const int64_t* r = row.data_ptr<int64_t>();
  const double* s = share.data_ptr<double>();
  double* o = out.data_ptr<double>();
  const auto limit = static_cast<uint64_t>(share.numel());
  std::atomic<bool> bad{false};
  const int64_t grain = std::max<int64_t>(1, width * kEntriesPerTask / std::max<int64_t>(edges, 1));
  at::parallel_for(0, width, grain, [&](int64_t begin, int64_t end) {
    const int64_t last = off[end];
    for (int64_t v = begin; v < end; ++v) {
      double acc = 0.0;
      for (int64_t j = off[v]; j < off[v + 1]; ++j) {
        if (j + kLookahead < last) {
          const auto ahead = static_cast<uint64_t>(r[j + kLookahead]);
          if (ahead < limit) __builtin_prefetch(s + ahead);
        }
        const auto u = static_cast<uint64_t>(r[j]);
        if (u >= limit) {  // reported below, after every thread stopped
          bad.store(true, std::memory_order_relaxed);
          return;
        }
        acc += s[u];
      }
      o[v] = acc;
    }
  });
  if (bad.load()) {
    const int64_t pos = std::find_if(r, r + edges, [&](int64_t u) {
                          return static_cast<uint64_t>(u) >= limit;
                        }) - r;
    TORCH_CHECK_INDEX(false, "row entry ", r[pos], " at position ", pos, " is out of range [0, ",
                      share.numel(), ")");
  }
}

}  // namespace graphtier
