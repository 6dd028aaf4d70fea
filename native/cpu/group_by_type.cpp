// A heterogeneous sample's nodes grouped by node type (launcher/runtime/models/rgcn.py's HeteroInput
// has the contract and the torch fallback it is tested against): for nodes of global ids `node_ids`
// and types `node_types`, returns
//
//   order    int64 [N]: the nodes' positions, type after type, ascending within a type (stable)
//   inverse  int64 [N]: where each position went in `order` (order[inverse[i]] == i)
//   local    int64 [N]: node_ids[order] less their type's first global id: type-local ids
//   counts   int64 [T]: the nodes of each type
//
// `offsets` [T + 1] are the types' id ranges (type t owns [offsets[t], offsets[t + 1])); a node whose
// id is outside its type's range is refused.
//
// The input layer computes each type's rows from its slice of `local` and puts them back in node
// order with one permutation; per type a compare, a nonzero, two index ops and an index_put (and
// its backward) cost it fifteen ops a step, each with its own overhead.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "graphtier/ops.h"

namespace graphtier {

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> group_by_type(const at::Tensor& node_ids,
                                                                          const at::Tensor& node_types,
                                                                          const at::Tensor& offsets) {
  for (const at::Tensor* t : {&node_ids, &node_types, &offsets}) {
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kLong && t->dim() == 1,
                "group_by_type: node_ids, node_types and offsets must be contiguous 1-D int64 on the CPU");
  }
  TORCH_CHECK(offsets.numel() >= 1, "group_by_type: offsets must hold the types' id ranges, [T + 1]");
  const int64_t n = node_ids.numel(), types = offsets.numel() - 1;
  TORCH_CHECK(node_types.numel() == n, "group_by_type: one node type per node id");
  const int64_t* ids = node_ids.data_ptr<int64_t>();
  const int64_t* type = node_types.data_ptr<int64_t>();
  const int64_t* first_id = offsets.data_ptr<int64_t>();
  at::Tensor counts = at::empty({types}, node_ids.options());
  int64_t* count = counts.data_ptr<int64_t>();
  std::fill_n(count, types, 0);
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(type[i] >= 0 && type[i] < types, "group_by_type: node ", i, " has node type ", type[i],
                ", not one of the ", types, " types");
    TORCH_CHECK(ids[i] >= first_id[type[i]] && ids[i] < first_id[type[i] + 1], "group_by_type: node ", i, " (id ",
                ids[i], ") is not in the id range of its type ", type[i]);
    ++count[type[i]];
  }
  std::vector<int64_t> next(types, 0);
  for (int64_t t = 1; t < types; ++t) next[t] = next[t - 1] + count[t - 1];
  at::Tensor order = at::empty({n}, node_ids.options());
  at::Tensor inverse = at::empty({n}, node_ids.options());
  at::Tensor local = at::empty({n}, node_ids.options());
  int64_t* o = order.data_ptr<int64_t>();
  int64_t* inv = inverse.data_ptr<int64_t>();
  int64_t* loc = local.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = next[type[i]]++;
    o[at] = i;
    inv[i] = at;
    loc[at] = ids[i] - first_id[type[i]];
  }
  return {order, inverse, local, counts};
}

}  // namespace graphtier
