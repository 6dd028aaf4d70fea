// Uniform k-hop neighbour sampling over a typed graph, one fanout per relation and hop.
//
// The typed graph is one CSC over global ids whose columns group their entries by relation id
// (ascending; `edge_type[e]` is entry e's relation), node type t owning the ids
// [type_offsets[t], type_offsets[t + 1]). Expanding node v of type t samples, for every relation
// r whose tail type is t and whose fanout k_r at this hop is not 0, min(k_r, d) of the d entries
// of v's relation-r range (all of them for k_r = -1), chosen by Floyd's algorithm driven by the
// counter-based RNG under the key of (local id of v) * R + r. The output is the homogeneous
// sampler's (node ids, per-node indptr, local indices, per-hop counts) plus the relation of every
// sampled edge; a node's edges come relation by relation, ascending. Same passes as
// sample_neighbors.cpp: parallel counts, prefix sum, parallel fill, prefetched gather, serial
// first-occurrence relabel, so the result is identical to the pure-torch twin
// (service/sampling/typed_sampler.py) whatever the thread count. The parallel passes run through
// parallel_chunks (graphtier/work_split.h), not OpenMP, for the reason sample_neighbors.cpp gives.
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <vector>

#include "graphtier/counter_rng.h"
#include "graphtier/floyd_sample.h"
#include "graphtier/ops.h"
#include "graphtier/work_split.h"

namespace graphtier {
namespace {

// Nodes or edges per chunk of a parallel pass; a pass of at most one chunk runs on the caller.
constexpr int64_t kCountGrain = 2048;
constexpr int64_t kSampleGrain = 256;
constexpr int64_t kRowGrain = 16384;

at::Tensor to_long(const std::vector<int64_t>& values) {
  at::Tensor out = at::detail::empty_cpu({static_cast<int64_t>(values.size())}, at::kLong);
  std::copy(values.begin(), values.end(), out.data_ptr<int64_t>());
  return out;
}

struct TypedGraph {
  const int64_t* colptr;
  const int64_t* row;
  const int16_t* edge_type;
  const int64_t* type_offsets;
  int64_t num_types;
  int64_t num_relations;
  std::vector<std::vector<int64_t>> relations_into;  // per node type: relation ids with that tail, ascending

  int64_t type_of(int64_t v) const {
    const int64_t* end = type_offsets + num_types + 1;
    return static_cast<int64_t>(std::upper_bound(type_offsets + 1, end, v) - (type_offsets + 1));
  }

  // [lo, hi) of v's entries of relation r.
  void range(int64_t v, int64_t r, int64_t& lo, int64_t& hi) const {
    const int16_t* b = edge_type + colptr[v];
    const int16_t* e = edge_type + colptr[v + 1];
    const auto rel = static_cast<int16_t>(r);
    lo = colptr[v] + (std::lower_bound(b, e, rel) - b);
    hi = colptr[v] + (std::upper_bound(b, e, rel) - b);
  }
};

template <typename map_t>
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> typed_impl(
    const TypedGraph& g, const at::Tensor& seeds_t, const int64_t* fanouts, int64_t num_hops,
    uint64_t seed, const at::Tensor& node_map_t, int64_t num_nodes) {
  const int64_t* seeds = seeds_t.data_ptr<int64_t>();
  map_t* node_map = node_map_t.data_ptr<map_t>();
  const int64_t batch = seeds_t.numel();
  const int64_t R = g.num_relations;
  const int nthreads = std::max(1, at::get_num_threads());

  std::vector<int64_t> node_ids, indptr{0}, indices, etypes, nodes_per_hop, edges_per_hop;
  node_ids.reserve(batch * 16);
  auto reset_map = [&]() {
    for (const int64_t id : node_ids) node_map[id] = static_cast<map_t>(-1);
  };
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t s = seeds[i];
    if (s < 0 || s >= num_nodes || node_map[s] != static_cast<map_t>(-1)) {
      reset_map();
      TORCH_CHECK_VALUE(false, "seed ", s, " at position ", i, " is out of range or repeated");
    }
    node_map[s] = static_cast<map_t>(i);
    node_ids.push_back(s);
  }
  nodes_per_hop.push_back(batch);

  int64_t f0 = 0, f1 = batch;
  for (int64_t hop = 0; hop < num_hops; ++hop) {
    const int64_t* k_of = fanouts + hop * R;
    const int64_t frontier = f1 - f0;
    const int64_t base = static_cast<int64_t>(indptr.size());
    indptr.resize(base + frontier);
    int64_t* counts = indptr.data() + base;
    const int64_t* fnodes = node_ids.data() + f0;

    parallel_chunks(frontier, kCountGrain, nthreads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t v = fnodes[i];
        int64_t total = 0;
        for (const int64_t r : g.relations_into[g.type_of(v)]) {
          const int64_t k = k_of[r];
          if (k == 0) continue;
          int64_t lo, hi;
          g.range(v, r, lo, hi);
          const int64_t d = hi - lo;
          total += (k < 0 || d <= k) ? d : k;
        }
        counts[i] = total;
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
    etypes.resize(e1);
    int64_t* out = indices.data();
    int64_t* out_type = etypes.data();
    const int64_t* ends = counts;

    parallel_chunks(frontier, kSampleGrain, nthreads, [&](int64_t begin, int64_t end) {
      thread_local std::vector<uint8_t> marks;  // all zero between uses (floyd_offsets)
      for (int64_t i = begin; i < end; ++i) {
        const int64_t v = fnodes[i];
        int64_t pos = (i == 0 ? indptr[base - 1] : ends[i - 1]);
        for (const int64_t r : g.relations_into[g.type_of(v)]) {
          const int64_t k = k_of[r];
          if (k == 0) continue;
          int64_t lo, hi;
          g.range(v, r, lo, hi);
          const int64_t d = hi - lo;
          int64_t* dst = out + pos;
          if (k < 0 || d <= k) {
            for (int64_t q = 0; q < d; ++q) dst[q] = lo + q;
            std::fill(out_type + pos, out_type + pos + d, r);
            pos += d;
          } else {
            const uint64_t key = node_key(seed, static_cast<uint64_t>(f0 + i) * static_cast<uint64_t>(R) +
                                                    static_cast<uint64_t>(r));
            floyd_offsets(key, d, k, dst, marks);
            for (int64_t q = 0; q < k; ++q) dst[q] += lo;
            std::fill(out_type + pos, out_type + pos + k, r);
            pos += k;
          }
        }
      }
    });
    parallel_chunks(e1 - e0, kRowGrain, nthreads, [&](int64_t begin, int64_t end) {
      for (int64_t e = e0 + begin; e < e0 + end; ++e) out[e] = g.row[out[e]];
    });

    for (int64_t e = e0; e < e1; ++e) {
      const int64_t id = out[e];
      map_t local = node_map[id];
      if (local < 0) {
        local = static_cast<map_t>(node_ids.size());
        node_map[id] = local;
        node_ids.push_back(id);
      }
      out[e] = static_cast<int64_t>(local);
    }
    nodes_per_hop.push_back(static_cast<int64_t>(node_ids.size()) - f1);
    edges_per_hop.push_back(e1 - e0);
    f0 = f1;
    f1 = static_cast<int64_t>(node_ids.size());
  }
  reset_map();
  return {to_long(node_ids), to_long(indptr), to_long(indices), to_long(etypes),
          to_long(nodes_per_hop), to_long(edges_per_hop)};
}

void check_long(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 1 && t.is_contiguous() && t.scalar_type() == at::kLong,
              name, " must be a contiguous 1-D int64 CPU tensor");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> sample_typed_neighbors(
    const at::Tensor& colptr, const at::Tensor& row, const at::Tensor& edge_type,
    const at::Tensor& type_offsets, const at::Tensor& relation_dst_type, const at::Tensor& seeds,
    at::IntArrayRef fanouts, int64_t seed, const at::Tensor& node_map) {
  check_long(colptr, "colptr");
  check_long(row, "row");
  check_long(type_offsets, "type_offsets");
  check_long(relation_dst_type, "relation_dst_type");
  check_long(seeds, "seeds");
  TORCH_CHECK(edge_type.device().is_cpu() && edge_type.dim() == 1 && edge_type.is_contiguous() &&
                  edge_type.scalar_type() == at::kShort && edge_type.numel() == row.numel(),
              "edge_type must be a contiguous 1-D int16 CPU tensor as long as row");
  const int64_t num_nodes = colptr.numel() - 1;
  const int64_t num_types = type_offsets.numel() - 1;
  const int64_t R = relation_dst_type.numel();
  TORCH_CHECK(num_types >= 1 && type_offsets.data_ptr<int64_t>()[0] == 0 &&
                  type_offsets.data_ptr<int64_t>()[num_types] == num_nodes,
              "type_offsets must run from 0 to num_nodes");
  TORCH_CHECK(R >= 1 && R <= 32767, "1 to 32767 relations are supported, got ", R);
  TORCH_CHECK(static_cast<int64_t>(fanouts.size()) % R == 0, "fanouts must hold one entry per relation per hop");
  for (const int64_t k : fanouts) TORCH_CHECK_VALUE(k >= -1, "fanout ", k, " is invalid; use -1, 0 or >= 1");
  TORCH_CHECK(node_map.device().is_cpu() && node_map.dim() == 1 && node_map.is_contiguous() &&
                  node_map.numel() == num_nodes,
              "node_map must be a contiguous 1-D CPU tensor of ", num_nodes, " entries");
  TypedGraph g{colptr.data_ptr<int64_t>(), row.data_ptr<int64_t>(), edge_type.data_ptr<int16_t>(),
               type_offsets.data_ptr<int64_t>(), num_types, R, {}};
  g.relations_into.resize(num_types);
  const int64_t* dst_type = relation_dst_type.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK(dst_type[r] >= 0 && dst_type[r] < num_types, "relation ", r, " has tail type ", dst_type[r],
                " outside [0, ", num_types, ")");
    g.relations_into[dst_type[r]].push_back(r);
  }
  const int64_t num_hops = static_cast<int64_t>(fanouts.size()) / R;
  const auto useed = static_cast<uint64_t>(seed);
  if (node_map.scalar_type() == at::kInt) {
    return typed_impl<int32_t>(g, seeds, fanouts.data(), num_hops, useed, node_map, num_nodes);
  }
  TORCH_CHECK(node_map.scalar_type() == at::kLong, "node_map must be int32 or int64");
  return typed_impl<int64_t>(g, seeds, fanouts.data(), num_hops, useed, node_map, num_nodes);
}

}  // namespace graphtier
