// Declarations of graphtier's native CPU ops, registered as torch.ops.graphtier.* in bindings.cpp.
#pragma once

#include <ATen/core/Tensor.h>

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

// The same over a typed graph (sample_typed_neighbors.cpp): `edge_type` (int16 [E]) is the relation
// of each CSC entry, grouped ascending within a column; node type t owns ids
// [type_offsets[t], type_offsets[t + 1]); relation r delivers to type relation_dst_type[r];
// fanouts holds one entry per relation per hop (hop-major; -1 all, 0 skip). Returns (node_ids,
// indptr, indices, edge_types, num_nodes_per_hop, num_edges_per_hop); see
// service/sampling/typed_sampler.py.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_typed_neighbors(
    const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& edge_type,
    const at::Tensor& type_offsets, const at::Tensor& relation_dst_type, const at::Tensor& seeds,
    at::IntArrayRef fanouts, int64_t seed, const at::Tensor& node_map);

// Copies rows `ids` of the tiered table (resident rows [0, host_end), storage rows
// [host_end, num_rows)) into out[:len(ids)] and returns int64 row counts per source and the
// position of the first id out of range (-1: none; otherwise nothing was copied):
// [replicated, interleaved_local, interleaved_peer, host, storage, first_bad_position].
// boundaries = [replicated_end, interleaved_end, host_end, num_rows].
at::Tensor tiered_gather(const at::Tensor& ids, const at::Tensor& resident,
                         const at::Tensor& storage, at::IntArrayRef boundaries,
                         int64_t num_devices, int64_t device_index, const at::Tensor& out);

// Out-of-core CSC build passes (csc_build.cpp; service/prepared/out_of_core/csc_passes.py has the contract
// and the numpy fallback each is tested against).
// counts[ids[i]] += 1 for every i.
void count_entries_(at::Tensor& counts, const at::Tensor& ids);
// For each edge i, with a = relabel[owner[i]] and b = relabel[other[i]] (relabel empty: the
// ids themselves): key a * num_nodes + b goes to out[cursor[B(a)]++], B(a) = the last bucket
// whose start column (bucket_starts, increasing from 0) is <= a; with both_ways also
// b * num_nodes + a to out[cursor[B(b)]++]. Refuses to write a bucket past its limit.
void scatter_csc_keys_(at::Tensor& out, at::Tensor& cursor, const at::Tensor& limit,
                       const at::Tensor& owner, const at::Tensor& other,
                       const at::Tensor& relabel, const at::Tensor& bucket_starts,
                       int64_t num_nodes, bool both_ways);
// The sorted keys[start:stop] (column * num_nodes + source) of columns [first_column,
// first_column + degree.numel()): writes their distinct sources to keys[dest:] (dest <= start:
// in place), adds each column's count to `degree` and returns how many were kept.
int64_t compact_csc_keys_(at::Tensor& keys, int64_t start, int64_t stop, int64_t dest,
                          int64_t num_nodes, int64_t first_column, at::Tensor& degree);

// out[v] = sum of share[row[j]] for j in [offsets[v], offsets[v + 1]), added in order from
// 0.0 (pull_sum.cpp): one PageRank pull over a column range, the bits of
// index_select + segment_reduce.
void pull_sum_(at::Tensor& out, const at::Tensor& share, const at::Tensor& offsets,
               const at::Tensor& row);

// One R-GAT layer over a block, every relation at once (rgat_conv.cpp; the contract and the torch
// forward it is tested against are in launcher/runtime/models/rgat.py). The forward returns (out,
// then what its backward reads: alpha, score, score_dst, folded_src, folded_dst, sums); the
// backward returns the gradients of x, weight, att_src, att_dst and bias.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rgat_conv(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src, const at::Tensor& att_dst,
    const at::Tensor& bias, const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_types,
    const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types, bool concat,
    double negative_slope);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rgat_conv_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src,
    const at::Tensor& att_dst, const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_types,
    const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types, bool concat,
    double negative_slope, const at::Tensor& alpha, const at::Tensor& score, const at::Tensor& score_dst,
    const at::Tensor& folded_src, const at::Tensor& folded_dst, const at::Tensor& sums);

// x's non-zeros as compressed rows (offsets, int32 columns, values), or three empty tensors when
// more than `max_share` of its values are non-zero; over them, x @ weight^T + bias and
// the weight's gradient grad_out^T @ x (sparse_input_linear.cpp; contract and fallback in
// launcher/runtime/models/sparse_input.py).
std::tuple<at::Tensor, at::Tensor, at::Tensor> sparse_rows(const at::Tensor& x, double max_share);
at::Tensor sparse_rows_linear(const at::Tensor& offsets, const at::Tensor& columns, const at::Tensor& values,
                              const at::Tensor& weight, const at::Tensor& bias);
at::Tensor sparse_rows_weight_grad(const at::Tensor& offsets, const at::Tensor& columns, const at::Tensor& values,
                                   const at::Tensor& grad_out, int64_t in_dim);

// One lazy AdamW step on the rows `rows` of a table (a repeated row's gradients summed), its moments
// and per-row step counts; returns the distinct rows updated, or -1 when `check_finite` found a
// non-finite gradient and changed nothing (row_adam.cpp; the contract and the torch fallback are in
// launcher/runtime/row_adam.py).
int64_t row_adam_(at::Tensor& weight, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, at::Tensor& steps,
                  const at::Tensor& rows, const at::Tensor& grad, double lr, double beta1, double beta2, double eps,
                  double weight_decay, bool check_finite);

// Dropout from counter-based random bits keyed by `seed`: element i kept when 16-bit lane i / W of
// word i % W (W = ceil(n / 4); word w = draw(splitmix64(seed), w), counter_rng.h) is at least
// `threshold`, kept values times `scale`; returns (result, each element's multiplier)
// (dropout_bits.cpp; contract and torch twin in launcher/runtime/models/dropout.py).
std::tuple<at::Tensor, at::Tensor> dropout_bits(const at::Tensor& x, int64_t seed, int64_t threshold, double scale);

// A heterogeneous sample's nodes grouped by type: (order, inverse, type-local ids in that order,
// counts per type) (group_by_type.cpp; contract and fallback in launcher/runtime/models/rgcn.py).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_by_type(const at::Tensor& node_ids,
                                                                          const at::Tensor& node_types,
                                                                          const at::Tensor& offsets);

}  // namespace graphtier
