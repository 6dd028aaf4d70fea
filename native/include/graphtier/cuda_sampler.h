// The GPU neighbour sampler's structure table and launchers. Plain CUDA (no torch headers), so
// the kernel file compiles with nvcc alone, on any machine that has it.
//
// One hop of the sampler is six steps on one stream (service/gpu/sampler.py runs them; the
// scans between them are torch cumsums):
//   1. launch_sample_degrees: per frontier node, its CSC start, in-degree and sample count
//   2. (scan) ends = inclusive prefix sum of the counts: node i's slice of the hop's edges
//   3. launch_sample_pick: per frontier node, the global ids of its sampled in-neighbours, the
//      same ones in the same order as the CPU sampler (native/cpu/sample_neighbors.cpp)
//   4. launch_relabel_mark: per edge, an unseen neighbour's node-map entry keeps the smallest
//      edge position it occurs at; launch_relabel_flag then flags that first occurrence
//   5. (scan) ranks = inclusive prefix sum of the flags: new nodes in first-occurrence order
//   6. launch_relabel_assign gives each new node the next local id; launch_relabel_apply turns
//      every edge's global id into its local id
// which is the CPU sampler's serial relabel, so node order and block edges are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace graphtier {
namespace cuda {

// Where the CSC (colptr, row) lives, as seen from one GPU. Nodes are numbered hottest first, so
// the device tier is a prefix (see service/placement/plan.py):
//   node v < device_end: colptr[v], colptr[v + 1] and its row entries from the device tier
//                        (device_colptr holds device_end + 1 entries, device_row colptr[device_end])
//   node v >= device_end: from registered host memory read in place (UVA), the whole CSC
struct StructureTable {
  const int64_t* device_colptr;
  const int64_t* device_row;
  const int64_t* host_colptr;
  const int64_t* host_row;
  int64_t device_end;
  int64_t num_nodes;
};

// The node map's mark of an unseen node first met at edge position e of the hop (below -1, the
// "unseen" value; local ids are >= 0).
constexpr int64_t kFirstSeenBase = INT64_MIN;

// starts[i], degrees[i] = CSC range of frontier[i]; counts[i] = its sample count under `fanout`
// (-1: all). int64 arrays of n entries.
cudaError_t launch_sample_degrees(const StructureTable& table, const int64_t* frontier, int64_t n,
                                  int64_t fanout, int64_t* starts, int64_t* degrees,
                                  int64_t* counts, int max_blocks, int threads,
                                  cudaStream_t stream);

// out[ends[i] - counts[i], ends[i]) = frontier[i]'s sampled in-neighbours (global ids): all of
// them in CSC order, or Floyd's `fanout` distinct offsets drawn from the stream of local id
// first_local + i under `seed`, sorted. `out` is the hop's edge slice.
cudaError_t launch_sample_pick(const StructureTable& table, const int64_t* frontier, int64_t n,
                               int64_t fanout, uint64_t seed, int64_t first_local,
                               const int64_t* starts, const int64_t* degrees, const int64_t* ends,
                               int64_t* out, int max_blocks, int threads, cudaStream_t stream);

// For each e < m with node_map[nbrs[e]] < 0: atomicMin(node_map[nbrs[e]], kFirstSeenBase + e).
cudaError_t launch_relabel_mark(const int64_t* nbrs, int64_t m, int64_t* node_map,
                                int max_blocks, int threads, cudaStream_t stream);

// flags[e] = 1 where edge e is its node's first occurrence in the hop (the mark is its own), else 0.
cudaError_t launch_relabel_flag(const int64_t* nbrs, int64_t m, const int64_t* node_map,
                                int64_t* flags, int max_blocks, int threads, cudaStream_t stream);

// For each flagged e: r = ranks[e] - 1; node_map[nbrs[e]] = next_local + r; new_nodes[r] = nbrs[e].
cudaError_t launch_relabel_assign(const int64_t* nbrs, int64_t m, const int64_t* flags,
                                  const int64_t* ranks, int64_t next_local, int64_t* node_map,
                                  int64_t* new_nodes, int max_blocks, int threads,
                                  cudaStream_t stream);

// local[e] = node_map[nbrs[e]].
cudaError_t launch_relabel_apply(const int64_t* nbrs, int64_t m, const int64_t* node_map,
                                 int64_t* local, int max_blocks, int threads, cudaStream_t stream);

}  // namespace cuda
}  // namespace graphtier
