// One R-GAT layer over a sampled block, forward and backward, as two calls (launcher/runtime/models/
// rgat.py has the contract; its torch forward is the reference each call is tested against).
//
// Per relation r (head type -> tail type) the layer holds a GATConv's weight W_r [H*C, in], attention
// vectors att_src[r], att_dst[r] [H, C] and bias[r]; a destination gets the sum over the relations
// ending at its type of that relation's attention over its in-edges, plus their biases:
//
//   table     each source's rows through the maps of the relations leaving its type: the sources
//             grouped by type (stable), one matrix product per type
//   score_dst x[:n] @ (W_r^T att_dst[r]) per relation and head (the destinations' rows never mapped)
//   messages  relation_attention (relation_attention.cpp) over the table
//   out       heads concatenated or averaged, plus the biases of the relations ending at the type
//
// Torch ran this as about sixty ops and as many autograd nodes a layer; on a sampled mini-batch's
// small blocks the layer was made of their overheads. Here the bookkeeping (grouping, each edge's
// table row, the folded attention vectors, the biases) is plain loops and the products are ATen's.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "graphtier/ops.h"

namespace graphtier {
namespace {

// The block's sources grouped by node type, and where each relation's mapped rows sit in the table.
struct Layout {
  int64_t sources = 0, types = 0, relations = 0, table_rows = 0;
  std::vector<int64_t> count, first;          // per type: its sources, its first place in `order`
  std::vector<int64_t> position;              // per source: its place among its type's sources
  std::vector<std::vector<int64_t>> outgoing;  // per type: the relations leaving it, in relation order
  std::vector<int64_t> first_row;             // per type: its first row in the table
  std::vector<int64_t> head, tail;            // per relation: its node types
  at::Tensor order;                           // int64 [sources]: the sources, type after type
};

void check_cpu(const at::Tensor& t, at::ScalarType dtype, int64_t dim, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype && t.dim() == dim,
              "rgat_conv: ", what, " must be a contiguous ", dim, "-D ", c10::toString(dtype),
              " tensor on the CPU");
}

Layout layout_of(const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types) {
  Layout l;
  l.sources = node_types.numel();
  l.types = num_types;
  l.relations = relation_types.size(0);
  const int64_t* nt = node_types.data_ptr<int64_t>();
  const int64_t* rt = relation_types.data_ptr<int64_t>();
  l.count.assign(num_types, 0);
  l.first.assign(num_types, 0);
  l.position.resize(l.sources);
  l.outgoing.resize(num_types);
  l.first_row.assign(num_types, 0);
  for (int64_t r = 0; r < l.relations; ++r) {
    const int64_t head = rt[2 * r], tail = rt[2 * r + 1];
    TORCH_CHECK(head >= 0 && head < num_types && tail >= 0 && tail < num_types,
                "rgat_conv: relation ", r, " joins node types out of range");
    l.head.push_back(head);
    l.tail.push_back(tail);
    l.outgoing[head].push_back(r);
  }
  for (int64_t s = 0; s < l.sources; ++s) {
    TORCH_CHECK(nt[s] >= 0 && nt[s] < num_types, "rgat_conv: source ", s, " has node type ", nt[s],
                " out of range");
    l.position[s] = l.count[nt[s]]++;
  }
  for (int64_t t = 1; t < num_types; ++t) l.first[t] = l.first[t - 1] + l.count[t - 1];
  l.order = at::empty({l.sources}, node_types.options());
  int64_t* order = l.order.data_ptr<int64_t>();
  for (int64_t s = 0; s < l.sources; ++s) order[l.first[nt[s]] + l.position[s]] = s;
  for (int64_t t = 0; t < num_types; ++t) {
    l.first_row[t] = l.table_rows;
    l.table_rows += l.count[t] * static_cast<int64_t>(l.outgoing[t].size());
  }
  return l;
}

// Type t's sources (their ids) and the maps of the relations leaving it, stacked: [k * H * C, in].
at::Tensor sources_of(const Layout& l, int64_t t) { return l.order.narrow(0, l.first[t], l.count[t]); }

at::Tensor maps_of(const Layout& l, const at::Tensor& weight, int64_t t) {
  const auto& relations = l.outgoing[t];
  const int64_t k = static_cast<int64_t>(relations.size());
  if (k == 1) return weight.select(0, relations[0]);
  std::vector<at::Tensor> maps;
  for (int64_t r : relations) maps.push_back(weight.select(0, r));
  return at::cat(maps).view({k * weight.size(1), weight.size(2)});
}

bool maps_rows(const Layout& l, int64_t t) { return l.count[t] > 0 && !l.outgoing[t].empty(); }

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rgat_conv(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src, const at::Tensor& att_dst,
    const at::Tensor& bias, const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_types,
    const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types, bool concat,
    double negative_slope) {
  check_cpu(x, at::kFloat, 2, "x");
  check_cpu(weight, at::kFloat, 3, "weight");
  check_cpu(att_src, at::kFloat, 3, "att_src");
  check_cpu(att_dst, at::kFloat, 3, "att_dst");
  check_cpu(bias, at::kFloat, 2, "bias");
  check_cpu(indptr, at::kLong, 1, "indptr");
  check_cpu(indices, at::kLong, 1, "indices");
  check_cpu(edge_types, at::kLong, 1, "edge_types");
  check_cpu(node_types, at::kLong, 1, "node_types");
  check_cpu(relation_types, at::kLong, 2, "relation_types");
  const int64_t S = x.size(0), in = x.size(1), R = weight.size(0), H = att_src.size(1), C = att_src.size(2);
  const int64_t n = indptr.numel() - 1, E = indices.numel(), width = concat ? H * C : C;
  TORCH_CHECK(R > 0 && weight.size(1) == H * C && weight.size(2) == in && att_src.size(0) == R &&
                  att_dst.sizes() == att_src.sizes() && bias.size(0) == R && bias.size(1) == width &&
                  relation_types.size(0) == R && relation_types.size(1) == 2 && node_types.numel() == S &&
                  edge_types.numel() == E && n >= 0 && n <= S,
              "rgat_conv: shapes disagree");
  const Layout l = layout_of(node_types, relation_types, num_types);

  // the table of mapped rows: per type, its sources through the maps of the relations leaving it
  at::Tensor table = at::empty({l.table_rows, H * C}, x.options());
  for (int64_t t = 0; t < num_types; ++t) {
    if (!maps_rows(l, t)) continue;
    const int64_t k = static_cast<int64_t>(l.outgoing[t].size());
    at::Tensor rows = table.narrow(0, l.first_row[t], l.count[t] * k).view({l.count[t], k * H * C});
    at::mm_out(rows, x.index_select(0, sources_of(l, t)), maps_of(l, weight, t).t());
  }
  // each edge's row of the table: its source's row through its relation's map
  at::Tensor edge_row = at::empty({E}, indices.options());
  const int64_t* src = indices.data_ptr<int64_t>();
  const int64_t* rel = edge_types.data_ptr<int64_t>();
  const int64_t* nt = node_types.data_ptr<int64_t>();
  int64_t* row = edge_row.data_ptr<int64_t>();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t s = src[e], r = rel[e];
    TORCH_CHECK(s >= 0 && s < S && r >= 0 && r < R, "rgat_conv: edge ", e, " has a source or relation out of range");
    TORCH_CHECK(nt[s] == l.head[r], "rgat_conv: edge ", e, " of relation ", r, " leaves a source of node type ",
                nt[s], ", not the relation's ", l.head[r]);
    const auto& leaving = l.outgoing[l.head[r]];
    const int64_t slot = std::find(leaving.begin(), leaving.end(), r) - leaving.begin();
    row[e] = l.first_row[l.head[r]] + l.position[s] * static_cast<int64_t>(leaving.size()) + slot;
  }
  // a_dst . (W_r x) == (W_r^T a_dst) . x: the destinations' logits without mapping their rows
  at::Tensor folded = at::zeros({R * H, in}, x.options());
  {
    const float* w = weight.data_ptr<float>();
    const float* a = att_dst.data_ptr<float>();
    float* f = folded.data_ptr<float>();
    for (int64_t rh = 0; rh < R * H; ++rh) {
      for (int64_t c = 0; c < C; ++c) {
        const float scale = a[rh * C + c];
        const float* wr = w + (rh * C + c) * in;
        float* fr = f + rh * in;
        for (int64_t i = 0; i < in; ++i) fr[i] += scale * wr[i];
      }
    }
  }
  at::Tensor score_dst = at::mm(x.narrow(0, 0, n), folded.t()).view({n, R, H});
  at::Tensor messages, alpha, score;
  if (E > 0) {
    std::tie(messages, alpha, score) = relation_attention(table.view({l.table_rows, H, C}), edge_row, indptr,
                                                          edge_types, att_src, score_dst, negative_slope);
  } else {
    messages = at::zeros({n, H, C}, x.options());
    alpha = at::empty({0, H}, x.options());
    score = at::empty({0, H}, x.options());
  }
  at::Tensor out = concat ? messages.view({n, width}) : messages.mean(1);
  // the biases of the relations ending at each destination's type
  std::vector<float> type_bias(num_types * width, 0.0f);
  const float* b = bias.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < width; ++j) type_bias[l.tail[r] * width + j] += b[r * width + j];
  }
  float* o = out.data_ptr<float>();
  for (int64_t d = 0; d < n; ++d) {
    const float* tb = type_bias.data() + nt[d] * width;
    for (int64_t j = 0; j < width; ++j) o[d * width + j] += tb[j];
  }
  return {out, table, edge_row, alpha, score, score_dst, folded};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rgat_conv_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src,
    const at::Tensor& att_dst, const at::Tensor& indptr, const at::Tensor& edge_types,
    const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types, bool concat,
    double negative_slope, const at::Tensor& table, const at::Tensor& edge_row, const at::Tensor& alpha,
    const at::Tensor& score, const at::Tensor& score_dst, const at::Tensor& folded) {
  check_cpu(grad_out, at::kFloat, 2, "grad_out");
  const int64_t in = x.size(1), R = weight.size(0), H = att_src.size(1), C = att_src.size(2);
  const int64_t n = indptr.numel() - 1, E = edge_row.numel(), width = concat ? H * C : C;
  TORCH_CHECK(grad_out.size(0) == n && grad_out.size(1) == width, "rgat_conv_backward: grad_out's shape");
  const Layout l = layout_of(node_types, relation_types, num_types);
  const int64_t* nt = node_types.data_ptr<int64_t>();

  // biases: each relation's gets the gradient of the destinations of its tail type
  std::vector<float> type_grad(num_types * width, 0.0f);
  const float* g = grad_out.data_ptr<float>();
  for (int64_t d = 0; d < n; ++d) {
    float* tg = type_grad.data() + nt[d] * width;
    for (int64_t j = 0; j < width; ++j) tg[j] += g[d * width + j];
  }
  at::Tensor grad_bias = at::empty({R, width}, grad_out.options());
  float* gb = grad_bias.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) std::copy_n(type_grad.data() + l.tail[r] * width, width, gb + r * width);

  at::Tensor grad_messages = concat ? grad_out.view({n, H, C})
                                    : grad_out.div(static_cast<double>(H)).unsqueeze(1).expand({n, H, C}).contiguous();
  at::Tensor grad_table, grad_att_src, grad_score_dst;
  if (E > 0) {
    std::tie(grad_table, grad_att_src, grad_score_dst) =
        relation_attention_backward(grad_messages, table.view({l.table_rows, H, C}), edge_row, indptr, edge_types,
                                    att_src, score_dst, alpha, score, negative_slope);
  } else {
    grad_table = at::zeros({l.table_rows, H, C}, x.options());
    grad_att_src = at::zeros_like(att_src);
    grad_score_dst = at::zeros_like(score_dst);
  }
  at::Tensor grad_x = at::zeros_like(x);
  at::Tensor grad_weight = at::zeros_like(weight);
  // score_dst = x[:n] @ folded^T, folded[r, h] = sum_c att_dst[r, h, c] W_r[h, c]
  at::Tensor grad_folded_by = grad_score_dst.view({n, R * H});
  grad_x.narrow(0, 0, n).addmm_(grad_folded_by, folded);
  at::Tensor grad_folded = at::mm(grad_folded_by.t(), x.narrow(0, 0, n));  // [R * H, in]
  at::Tensor grad_att_dst = at::empty_like(att_dst);
  {
    const float* w = weight.data_ptr<float>();
    const float* a = att_dst.data_ptr<float>();
    const float* gf = grad_folded.data_ptr<float>();
    float* gw = grad_weight.data_ptr<float>();
    float* ga = grad_att_dst.data_ptr<float>();
    for (int64_t rh = 0; rh < R * H; ++rh) {
      const float* gfr = gf + rh * in;
      for (int64_t c = 0; c < C; ++c) {
        const float scale = a[rh * C + c];
        const float* wr = w + (rh * C + c) * in;
        float* gwr = gw + (rh * C + c) * in;
        float dot = 0.0f;
        for (int64_t i = 0; i < in; ++i) {
          gwr[i] += scale * gfr[i];
          dot += gfr[i] * wr[i];
        }
        ga[rh * C + c] = dot;
      }
    }
  }
  // the table: per type, back through its maps to its sources and to the maps
  at::Tensor grad_rows_all = grad_table.view({l.table_rows, H * C});
  for (int64_t t = 0; t < num_types; ++t) {
    if (!maps_rows(l, t)) continue;
    const int64_t k = static_cast<int64_t>(l.outgoing[t].size());
    at::Tensor grad_rows = grad_rows_all.narrow(0, l.first_row[t], l.count[t] * k).view({l.count[t], k * H * C});
    at::Tensor sources = sources_of(l, t);
    grad_x.index_add_(0, sources, at::mm(grad_rows, maps_of(l, weight, t)));
    at::Tensor grad_maps = at::mm(grad_rows.t(), x.index_select(0, sources));  // [k * H * C, in]
    for (int64_t j = 0; j < k; ++j) grad_weight.select(0, l.outgoing[t][j]).add_(grad_maps.narrow(0, j * H * C, H * C));
  }
  return {grad_x, grad_weight, grad_att_src, grad_att_dst, grad_bias};
}

}  // namespace graphtier
