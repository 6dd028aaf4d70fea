// Declarations of graphtier's native CPU ops, registered as torch.ops.graphtier.* in bindings.cpp.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>

namespace graphtier {

// Uniform k-hop neighbour sampling without replacement over a CSC graph (PyG hop semantics).
// Returns (node_ids, indptr, indices, num_nodes_per_hop, num_edges_per_hop); see
// service/sampling/neighbor_sampler.py for the exact contract. `node_map` is an int32/int64
// [N] scratch map filled with -1; it is -1 again when the op returns or throws.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_neighbors(
    const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& seeds,
    at::IntArrayRef fanouts, int64_t seed, const at::Tensor& node_map);

// Copies rows `ids` of the tiered table (resident rows [0, host_end), storage rows
// [host_end, num_rows)) into out[:len(ids)] and returns int64 row counts per source:
// [replicated, interleaved_local, interleaved_peer, host, storage].
// boundaries = [replicated_end, interleaved_end, host_end, num_rows].
at::Tensor tiered_gather(const at::Tensor& ids, const at::Tensor& resident,
                         const at::Tensor& storage, at::IntArrayRef boundaries,
                         int64_t num_devices, int64_t device_index, const at::Tensor& out);

}  // namespace graphtier
