// Uniform k-hop neighbour sampling without replacement (PyG hop semantics, disjoint=False).
//
// Per hop: (1) in parallel, read each frontier node's CSC range and its sample count;
// (2) prefix-sum the counts into the output indptr; (3) in parallel, fill each node's slice
// of the edge stream with edge positions, chosen by Robert Floyd's algorithm driven by the
// counter-based RNG, so the result does not depend on the thread count; (4) in parallel,
// turn positions into neighbour ids with a prefetched flat gather from `row` (the random
// reads of a hop overlap instead of stalling one node at a time); (5) one serial pass over
// the new edges relabels them through the caller's node map (first occurrence order), which
// is what makes the output identical to the pure-torch fallback.
//
// The parallel steps run through parallel_chunks (graphtier/work_split.h), not OpenMP: the
// sampler shares its cores with trainer processes, and OpenMP's spinning, all-threads
// regions made a batch 10-20x slower there.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "graphtier/counter_rng.h"
#include "graphtier/floyd_sample.h"
#include "graphtier/ops.h"
#include "graphtier/work_split.h"

namespace graphtier {
namespace {

// Allocator that leaves elements default-initialised: resize() without a memset.
template <typename T>
struct NoInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = NoInitAllocator<U>;
  };
  NoInitAllocator() = default;
  template <typename U>
  NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using I64Vec = std::vector<int64_t, NoInitAllocator<int64_t>>;

// Hands a vector to torch without copying; the tensor's deleter frees it.
at::Tensor to_tensor(I64Vec&& values) {
  auto* owned = new I64Vec(std::move(values));
  const auto n = static_cast<int64_t>(owned->size());
  return at::from_blob(
      owned->data(), {n}, [owned](void*) { delete owned; }, at::TensorOptions().dtype(at::kLong));
}

// Iterations ahead for the prefetches of each pass: a miss to memory lasts ~100 ns, a colptr
// iteration a few ns; the row gather and the relabel each do less per item, so they need more
// misses in flight (R-MAT 21, 15,10,5, cold caches: 16 -> 96 cut the row gather 1.5 -> 0.7 ms,
// 16 -> 64 the relabel 1.8 -> 1.2 ms; longer distances gained nothing).
constexpr int64_t kPrefetch = 16;         // colptr, in the degree pass
constexpr int64_t kRowPrefetch = 96;      // row, in the position -> id gather
constexpr int64_t kRelabelPrefetch = 64;  // node map, in the serial relabel
// Items per chunk of each parallel step: large enough that claiming a chunk costs nothing
// next to running it, small enough that a helper joining late still finds work.
constexpr int64_t kResetGrain = 65536;
constexpr int64_t kDegreeGrain = 2048;
constexpr int64_t kFloydGrain = 256;
constexpr int64_t kGatherGrain = 8192;

template <typename map_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_impl(
    const at::Tensor& colptr_t, const at::Tensor& row_t, const at::Tensor& seeds_t,
    at::IntArrayRef fanouts, uint64_t seed, const at::Tensor& node_map_t) {
  const int64_t* colptr = colptr_t.data_ptr<int64_t>();
  const int64_t* row = row_t.data_ptr<int64_t>();
  const int64_t* seeds = seeds_t.data_ptr<int64_t>();
  map_t* node_map = node_map_t.data_ptr<map_t>();
  const int64_t num_nodes = colptr_t.numel() - 1;
  const int64_t batch = seeds_t.numel();
  const int nthreads = std::max(1, at::get_num_threads());

  I64Vec node_ids, indptr, indices;
  I64Vec nodes_per_hop, edges_per_hop;
  node_ids.reserve(batch * 16);
  indptr.reserve(batch * 16);
  indptr.push_back(0);

  auto reset_map = [&]() {
    const int64_t n = static_cast<int64_t>(node_ids.size());
    const int64_t* ids = node_ids.data();
    parallel_chunks(n, kResetGrain, nthreads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) node_map[ids[i]] = static_cast<map_t>(-1);
    });
  };

  // Seeds: range and duplicates (the node map already holds an entry for a repeated seed).
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t s = seeds[i];
    if (s < 0 || s >= num_nodes) {
      reset_map();
      TORCH_CHECK_INDEX(false, "seed ", s, " at position ", i, " is out of range [0, ",
                        num_nodes, ")");
    }
    if (node_map[s] != static_cast<map_t>(-1)) {
      reset_map();
      TORCH_CHECK_VALUE(false, "seed ", s, " at position ", i,
                        " repeats an earlier seed; seeds must be unique");
    }
    node_map[s] = static_cast<map_t>(i);
    node_ids.push_back(s);
  }
  nodes_per_hop.push_back(batch);

  try {
    I64Vec starts, degrees;
    int64_t f0 = 0, f1 = batch;
    for (const int64_t k : fanouts) {
      const int64_t frontier = f1 - f0;
      const int64_t* fnodes = node_ids.data() + f0;
      starts.resize(frontier);
      degrees.resize(frontier);
      const int64_t base = static_cast<int64_t>(indptr.size());  // == f0 + 1
      indptr.resize(base + frontier);
      int64_t* counts = indptr.data() + base;

      int64_t* starts_out = starts.data();
      int64_t* degrees_out = degrees.data();
      parallel_chunks(frontier, kDegreeGrain, nthreads, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          if (i + kPrefetch < end) __builtin_prefetch(colptr + fnodes[i + kPrefetch]);
          const int64_t v = fnodes[i];
          const int64_t s = colptr[v];
          const int64_t d = colptr[v + 1] - s;
          starts_out[i] = s;
          degrees_out[i] = d;
          counts[i] = (k < 0 || d <= k) ? d : k;
        }
      });
      int64_t running = indptr[base - 1];
      for (int64_t i = 0; i < frontier; ++i) {
        running += counts[i];
        counts[i] = running;
      }
      const int64_t e0 = static_cast<int64_t>(indices.size());
      const int64_t e1 = running;
      indices.resize(e1);
      int64_t* out = indices.data();
      const int64_t* ends = counts;  // ends[i] = end of node i's slice in `indices`

      // Edge positions in `row`: all of a small list, or Floyd's k offsets for a large one.
      parallel_chunks(frontier, kFloydGrain, nthreads, [&](int64_t begin, int64_t end) {
        thread_local std::vector<uint8_t> marks;  // all zero between uses (floyd_offsets)
        for (int64_t i = begin; i < end; ++i) {
          const int64_t s = starts_out[i];
          const int64_t d = degrees_out[i];
          const bool all = k < 0 || d <= k;
          int64_t* dst = out + ends[i] - (all ? d : k);
          if (all) {
            for (int64_t q = 0; q < d; ++q) dst[q] = s + q;
          } else {
            floyd_offsets(node_key(seed, static_cast<uint64_t>(f0 + i)), d, k, dst, marks);
            for (int64_t q = 0; q < k; ++q) dst[q] += s;
          }
        }
      });
      // Positions -> global neighbour ids: a flat gather from `row`, prefetched ahead so many
      // cache misses are in flight at once.
      parallel_chunks(e1 - e0, kGatherGrain, nthreads, [&](int64_t begin, int64_t end) {
        for (int64_t e = e0 + begin; e < e0 + end; ++e) {
          if (e + kRowPrefetch < e0 + end) __builtin_prefetch(row + out[e + kRowPrefetch]);
          out[e] = row[out[e]];
        }
      });

      // Serial relabel in stream order: new nodes get the next local id on first sight.
      for (int64_t e = e0; e < e1; ++e) {
        if (e + kRelabelPrefetch < e1) __builtin_prefetch(node_map + out[e + kRelabelPrefetch], 1);
        const int64_t g = out[e];
        map_t local = node_map[g];
        if (local < 0) {
          local = static_cast<map_t>(node_ids.size());
          node_map[g] = local;
          node_ids.push_back(g);
        }
        out[e] = static_cast<int64_t>(local);
      }
      nodes_per_hop.push_back(static_cast<int64_t>(node_ids.size()) - f1);
      edges_per_hop.push_back(e1 - e0);
      f0 = f1;
      f1 = static_cast<int64_t>(node_ids.size());
    }
  } catch (...) {
    reset_map();
    throw;
  }
  reset_map();
  return {to_tensor(std::move(node_ids)), to_tensor(std::move(indptr)),
          to_tensor(std::move(indices)), to_tensor(std::move(nodes_per_hop)),
          to_tensor(std::move(edges_per_hop))};
}

void check_1d_long(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.dim() == 1, name, " must be 1-D, got shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == at::kLong, name, " must be int64, got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_neighbors(
    const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& seeds,
    at::IntArrayRef fanouts, int64_t seed, const at::Tensor& node_map) {
  check_1d_long(colptr, "colptr");
  check_1d_long(row, "row");
  check_1d_long(seeds, "seeds");
  TORCH_CHECK(colptr.numel() >= 1, "colptr must have num_nodes + 1 >= 1 entries");
  const int64_t num_nodes = colptr.numel() - 1;
  TORCH_CHECK(node_map.device().is_cpu() && node_map.dim() == 1 && node_map.is_contiguous() &&
                  node_map.numel() == num_nodes,
              "node_map must be a contiguous 1-D CPU tensor of ", num_nodes, " entries");
  for (const int64_t k : fanouts) {
    TORCH_CHECK_VALUE(k == -1 || k >= 1, "fanout ", k, " is invalid; use -1 (all) or >= 1");
  }
  const auto useed = static_cast<uint64_t>(seed);
  if (node_map.scalar_type() == at::kInt) {
    TORCH_CHECK(num_nodes < (int64_t{1} << 31), "an int32 node_map needs < 2^31 nodes");
    return sample_impl<int32_t>(colptr, row, seeds, fanouts, useed, node_map);
  }
  TORCH_CHECK(node_map.scalar_type() == at::kLong, "node_map must be int32 or int64, got ",
              node_map.scalar_type());
  return sample_impl<int64_t>(colptr, row, seeds, fanouts, useed, node_map);
}

}  // namespace graphtier
