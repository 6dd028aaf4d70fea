// k-hop uniform neighbour sampling without replacement on the GPU, over a CSC whose hottest
// nodes' lists are in device memory and the rest in registered host memory (zero-copy). See
// graphtier/cuda_sampler.h for the steps of a hop and their contracts.
//
// Every draw comes from the counter-based RNG the CPU sampler uses (graphtier/counter_rng.h,
// the same code compiled for the device), keyed by (seed, local id of the expanded node, draw
// index), and Floyd's algorithm runs exactly as in native/cpu/sample_neighbors.cpp, so a
// frontier node picks the same neighbours in the same order. One thread expands one frontier
// node (grid-stride); its scratch is its own slice of the output, so nothing lives in local
// memory. Relabelling replaces the CPU's serial first-sight pass by a mark (atomicMin of the
// edge position into the node map), a flag of each node's first occurrence, a prefix sum of
// the flags and an assign: the new nodes get local ids in first-occurrence order, as on the CPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "graphtier/counter_rng.h"
#include "graphtier/cuda_sampler.h"

namespace graphtier {
namespace cuda {
namespace {

// The tier holding node v's list follows from its id: the device prefix, else the host copy.
__device__ __forceinline__ const int64_t* colptr_of(const StructureTable& t, int64_t v) {
  return v < t.device_end ? t.device_colptr : t.host_colptr;
}

__device__ __forceinline__ const int64_t* row_of(const StructureTable& t, int64_t v) {
  return v < t.device_end ? t.device_row : t.host_row;
}

__device__ __forceinline__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t grid_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__global__ void sample_degrees_kernel(const StructureTable t, const int64_t* __restrict__ frontier,
                                      int64_t n, int64_t k, int64_t* __restrict__ starts,
                                      int64_t* __restrict__ degrees, int64_t* __restrict__ counts) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t v = frontier[i];
    const int64_t* colptr = colptr_of(t, v);
    const int64_t s = colptr[v];
    const int64_t d = colptr[v + 1] - s;
    starts[i] = s;
    degrees[i] = d;
    counts[i] = (k < 0 || d <= k) ? d : k;
  }
}

__global__ void sample_pick_kernel(const StructureTable t, const int64_t* __restrict__ frontier,
                                   int64_t n, int64_t k, uint64_t seed, int64_t first_local,
                                   const int64_t* __restrict__ starts,
                                   const int64_t* __restrict__ degrees,
                                   const int64_t* __restrict__ ends, int64_t* __restrict__ out) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t v = frontier[i];
    const int64_t* row = row_of(t, v);
    const int64_t s = starts[i];
    const int64_t d = degrees[i];
    const bool all = k < 0 || d <= k;
    int64_t* dst = out + ends[i] - (all ? d : k);
    if (all) {
      for (int64_t q = 0; q < d; ++q) dst[q] = row[s + q];
      continue;
    }
    // Floyd's algorithm: round q draws u in [0, j + 1), j = d - k + q, and keeps u unless an
    // earlier round chose it, then j. dst[0, q) holds the earlier choices.
    const uint64_t key = node_key(seed, static_cast<uint64_t>(first_local + i));
    for (int64_t q = 0; q < k; ++q) {
      const int64_t j = d - k + q;
      int64_t u = uniform_below(draw(key, static_cast<uint64_t>(q)), j + 1);
      bool taken = false;
      for (int64_t p = 0; p < q; ++p) taken |= (dst[p] == u);
      dst[q] = taken ? j : u;
    }
    // Ascending offsets (insertion sort), then offsets -> neighbour ids.
    for (int64_t q = 1; q < k; ++q) {
      const int64_t x = dst[q];
      int64_t p = q;
      for (; p > 0 && dst[p - 1] > x; --p) dst[p] = dst[p - 1];
      dst[p] = x;
    }
    for (int64_t q = 0; q < k; ++q) dst[q] = row[s + dst[q]];
  }
}

__global__ void relabel_mark_kernel(const int64_t* __restrict__ nbrs, int64_t m,
                                    int64_t* __restrict__ node_map) {
  for (int64_t e = first_index(); e < m; e += grid_stride()) {
    int64_t* slot = node_map + nbrs[e];
    // A seen node's entry (its local id) does not change during the mark, so reading it and
    // then marking only unseen entries races with nothing but other marks.
    if (*slot < 0) {
      atomicMin(reinterpret_cast<long long*>(slot), static_cast<long long>(kFirstSeenBase + e));
    }
  }
}

__global__ void relabel_flag_kernel(const int64_t* __restrict__ nbrs, int64_t m,
                                    const int64_t* __restrict__ node_map,
                                    int64_t* __restrict__ flags) {
  for (int64_t e = first_index(); e < m; e += grid_stride()) {
    flags[e] = node_map[nbrs[e]] == kFirstSeenBase + e ? 1 : 0;
  }
}

__global__ void relabel_assign_kernel(const int64_t* __restrict__ nbrs, int64_t m,
                                      const int64_t* __restrict__ flags,
                                      const int64_t* __restrict__ ranks, int64_t next_local,
                                      int64_t* __restrict__ node_map,
                                      int64_t* __restrict__ new_nodes) {
  for (int64_t e = first_index(); e < m; e += grid_stride()) {
    if (flags[e]) {
      const int64_t r = ranks[e] - 1;
      const int64_t g = nbrs[e];
      node_map[g] = next_local + r;
      new_nodes[r] = g;
    }
  }
}

__global__ void relabel_apply_kernel(const int64_t* nbrs, int64_t m,
                                     const int64_t* __restrict__ node_map, int64_t* local) {
  for (int64_t e = first_index(); e < m; e += grid_stride()) local[e] = node_map[nbrs[e]];
}

bool bad_shape(int max_blocks, int threads) {
  return max_blocks < 1 || threads < 32 || threads > 1024 || threads % 32 != 0;
}

int blocks_for(int64_t n, int max_blocks, int threads) {
  const int64_t wanted = (n + threads - 1) / threads;
  return static_cast<int>(wanted < max_blocks ? wanted : max_blocks);
}

}  // namespace

cudaError_t launch_sample_degrees(const StructureTable& table, const int64_t* frontier, int64_t n,
                                  int64_t fanout, int64_t* starts, int64_t* degrees,
                                  int64_t* counts, int max_blocks, int threads,
                                  cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (bad_shape(max_blocks, threads)) return cudaErrorInvalidValue;
  sample_degrees_kernel<<<blocks_for(n, max_blocks, threads), threads, 0, stream>>>(
      table, frontier, n, fanout, starts, degrees, counts);
  return cudaGetLastError();
}

cudaError_t launch_sample_pick(const StructureTable& table, const int64_t* frontier, int64_t n,
                               int64_t fanout, uint64_t seed, int64_t first_local,
                               const int64_t* starts, const int64_t* degrees, const int64_t* ends,
                               int64_t* out, int max_blocks, int threads, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (bad_shape(max_blocks, threads)) return cudaErrorInvalidValue;
  sample_pick_kernel<<<blocks_for(n, max_blocks, threads), threads, 0, stream>>>(
      table, frontier, n, fanout, seed, first_local, starts, degrees, ends, out);
  return cudaGetLastError();
}

cudaError_t launch_relabel_mark(const int64_t* nbrs, int64_t m, int64_t* node_map,
                                int max_blocks, int threads, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (bad_shape(max_blocks, threads)) return cudaErrorInvalidValue;
  relabel_mark_kernel<<<blocks_for(m, max_blocks, threads), threads, 0, stream>>>(nbrs, m, node_map);
  return cudaGetLastError();
}

cudaError_t launch_relabel_flag(const int64_t* nbrs, int64_t m, const int64_t* node_map,
                                int64_t* flags, int max_blocks, int threads, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (bad_shape(max_blocks, threads)) return cudaErrorInvalidValue;
  relabel_flag_kernel<<<blocks_for(m, max_blocks, threads), threads, 0, stream>>>(nbrs, m, node_map,
                                                                                  flags);
  return cudaGetLastError();
}

cudaError_t launch_relabel_assign(const int64_t* nbrs, int64_t m, const int64_t* flags,
                                  const int64_t* ranks, int64_t next_local, int64_t* node_map,
                                  int64_t* new_nodes, int max_blocks, int threads,
                                  cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (bad_shape(max_blocks, threads)) return cudaErrorInvalidValue;
  relabel_assign_kernel<<<blocks_for(m, max_blocks, threads), threads, 0, stream>>>(
      nbrs, m, flags, ranks, next_local, node_map, new_nodes);
  return cudaGetLastError();
}

cudaError_t launch_relabel_apply(const int64_t* nbrs, int64_t m, const int64_t* node_map,
                                 int64_t* local, int max_blocks, int threads, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (bad_shape(max_blocks, threads)) return cudaErrorInvalidValue;
  relabel_apply_kernel<<<blocks_for(m, max_blocks, threads), threads, 0, stream>>>(nbrs, m, node_map,
                                                                                   local);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace graphtier
