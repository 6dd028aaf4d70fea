// One R-GAT layer over a sampled block, forward and backward, as two calls (launcher/runtime/models/
// rgat.py has the contract; its torch forward is the reference each call is tested against).
//
// Per relation r (head type -> tail type) the layer holds a GATConv's weight W_r [H, C, in], its
// attention vectors att_src[r], att_dst[r] [H, C] and bias[r]. Destination v gets, for every relation
// r ending at its type and every head h,
//
//   z[e, h]      = LeakyReLU(att_src[r, h] . W_r[h] x_src(e) + att_dst[r, h] . W_r[h] x_v)
//   alpha[e, h]  = softmax of z over v's in-edges of relation r
//   out[v, h]   += W_r[h] (sum over those edges of alpha[e, h] x_src(e))
//
// plus the biases of those relations. Both logits fold the attention vector into the map
// (a . W x == (W^T a) . x), and the map is applied after the weighted sum rather than to every
// source: a destination's rows of each relation ending at it are mapped once, not each source row
// once per relation leaving it, which on sampled blocks (many more sources than destinations) is a
// fraction of the multiply-adds. The attention and its backward are one pass per destination
// (parallel over destinations, no atomics); the maps are one batched product per relation, over
// the heads. Torch ran the layer as about sixty ops and as many autograd nodes, which on a
// mini-batch's small blocks was most of its time.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "graphtier/cpu_clones.h"
#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kEdgesPerTask = 1024;  // attention work per parallel task, in edges

// Where everything of one call sits: shapes, each destination's place among its type's
// destinations, and per relation its block of summed rows ([H, destinations of its tail type, in]).
struct Layout {
  int64_t sources = 0, dsts = 0, edges = 0, relations = 0, heads = 0, channels = 0, in = 0;
  std::vector<int64_t> head, tail;              // per relation
  std::vector<int64_t> dst_count;               // per type: its destinations
  std::vector<int64_t> dst_position;            // per destination: its place among its type's
  std::vector<std::vector<int64_t>> dsts_of;    // per type: its destinations, in block order
  std::vector<int64_t> sum_offset;              // per relation: its first float in the summed rows
  int64_t sum_floats = 0;

  template <typename Float>
  Float* sums_of(Float* sums, int64_t r, int64_t h, int64_t v) const {
    return sums + sum_offset[r] + (h * dst_count[tail[r]] + dst_position[v]) * in;
  }
};

void check_cpu(const at::Tensor& t, at::ScalarType dtype, int64_t dim, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype && t.dim() == dim,
              "rgat_conv: ", what, " must be a contiguous ", dim, "-D ", c10::toString(dtype),
              " tensor on the CPU");
}

// The layout of a call, with every index checked (the edges when `check_edges`): each edge's source
// and relation in range, its relation leaving the source's type and ending at the destination's.
Layout layout_of(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src, const at::Tensor& indptr,
                 const at::Tensor& indices, const at::Tensor& edge_types, const at::Tensor& node_types,
                 const at::Tensor& relation_types, int64_t num_types, bool check_edges) {
  check_cpu(x, at::kFloat, 2, "x");
  check_cpu(weight, at::kFloat, 3, "weight");
  check_cpu(att_src, at::kFloat, 3, "att_src");
  check_cpu(indptr, at::kLong, 1, "indptr");
  check_cpu(indices, at::kLong, 1, "indices");
  check_cpu(edge_types, at::kLong, 1, "edge_types");
  check_cpu(node_types, at::kLong, 1, "node_types");
  check_cpu(relation_types, at::kLong, 2, "relation_types");
  Layout l;
  l.sources = x.size(0), l.in = x.size(1), l.relations = weight.size(0);
  l.heads = att_src.size(1), l.channels = att_src.size(2);
  l.dsts = indptr.numel() - 1, l.edges = indices.numel();
  TORCH_CHECK(l.relations > 0 && weight.size(1) == l.heads * l.channels && weight.size(2) == l.in &&
                  att_src.size(0) == l.relations && relation_types.size(0) == l.relations &&
                  relation_types.size(1) == 2 && node_types.numel() == l.sources && edge_types.numel() == l.edges &&
                  l.dsts >= 0 && l.dsts <= l.sources,
              "rgat_conv: shapes disagree");
  const int64_t* rt = relation_types.data_ptr<int64_t>();
  for (int64_t r = 0; r < l.relations; ++r) {
    TORCH_CHECK(rt[2 * r] >= 0 && rt[2 * r] < num_types && rt[2 * r + 1] >= 0 && rt[2 * r + 1] < num_types,
                "rgat_conv: relation ", r, " joins node types out of range");
    l.head.push_back(rt[2 * r]);
    l.tail.push_back(rt[2 * r + 1]);
  }
  const int64_t* nt = node_types.data_ptr<int64_t>();
  l.dst_count.assign(num_types, 0);
  l.dst_position.resize(l.dsts);
  l.dsts_of.resize(num_types);
  for (int64_t v = 0; v < l.sources; ++v) {
    TORCH_CHECK(nt[v] >= 0 && nt[v] < num_types, "rgat_conv: source ", v, " has node type ", nt[v], " out of range");
    if (v < l.dsts) {
      l.dst_position[v] = l.dst_count[nt[v]]++;
      l.dsts_of[nt[v]].push_back(v);
    }
  }
  for (int64_t r = 0; r < l.relations; ++r) {
    l.sum_offset.push_back(l.sum_floats);
    l.sum_floats += l.heads * l.dst_count[l.tail[r]] * l.in;
  }
  const int64_t* off = indptr.data_ptr<int64_t>();
  const int64_t* src = indices.data_ptr<int64_t>();
  const int64_t* rel = edge_types.data_ptr<int64_t>();
  TORCH_CHECK(l.dsts == 0 || (off[0] == 0 && off[l.dsts] == l.edges), "rgat_conv: indptr must run 0..edges");
  for (int64_t v = 0; check_edges && v < l.dsts; ++v) {
    TORCH_CHECK(off[v] <= off[v + 1], "rgat_conv: indptr decreases at destination ", v);
    for (int64_t e = off[v]; e < off[v + 1]; ++e) {
      const int64_t s = src[e], r = rel[e];
      TORCH_CHECK(s >= 0 && s < l.sources && r >= 0 && r < l.relations, "rgat_conv: edge ", e,
                  " has a source or relation out of range");
      TORCH_CHECK(nt[s] == l.head[r] && nt[v] == l.tail[r], "rgat_conv: edge ", e, " of relation ", r,
                  " joins node types ", nt[s], " -> ", nt[v], ", not the relation's ", l.head[r], " -> ", l.tail[r]);
    }
  }
  return l;
}

// The two vector kernels of the layer, compiled for AVX-512, for AVX2 with FMA and for the baseline
// x86-64 (the loader picks the one the CPU runs); the dot product's partial sums run in parallel
// lanes (a single running sum would wait on every multiply-add).
GRAPHTIER_CPU_CLONES float dot(const float* a, const float* b, int64_t n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

GRAPHTIER_CPU_CLONES void add_scaled(float* __restrict__ y, const float* __restrict__ x, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// folded[r * H + h] = sum_c att[r, h, c] W_r[h, c]: [R * H, in].
at::Tensor fold(const Layout& l, const at::Tensor& weight, const at::Tensor& att) {
  at::Tensor folded = at::zeros({l.relations * l.heads, l.in}, weight.options());
  const float* w = weight.data_ptr<float>();
  const float* a = att.data_ptr<float>();
  float* f = folded.data_ptr<float>();
  for (int64_t rh = 0; rh < l.relations * l.heads; ++rh) {
    for (int64_t c = 0; c < l.channels; ++c) {
      add_scaled(f + rh * l.in, w + (rh * l.channels + c) * l.in, a[rh * l.channels + c], l.in);
    }
  }
  return folded;
}

// The fold's backward: grad_weight += att (x) grad_folded, and grad_att[r, h, c] = grad_folded[r * H + h] . W_r[h, c].
at::Tensor unfold(const Layout& l, const at::Tensor& weight, const at::Tensor& att, const at::Tensor& grad_folded,
                  at::Tensor& grad_weight) {
  at::Tensor grad_att = at::empty_like(att);
  const float* w = weight.data_ptr<float>();
  const float* a = att.data_ptr<float>();
  const float* gf = grad_folded.data_ptr<float>();
  float* gw = grad_weight.data_ptr<float>();
  float* ga = grad_att.data_ptr<float>();
  for (int64_t rh = 0; rh < l.relations * l.heads; ++rh) {
    const float* gfr = gf + rh * l.in;
    for (int64_t c = 0; c < l.channels; ++c) {
      const int64_t at_c = rh * l.channels + c;
      add_scaled(gw + at_c * l.in, gfr, a[at_c], l.in);
      ga[at_c] = dot(gfr, w + at_c * l.in, l.in);
    }
  }
  return grad_att;
}

int64_t grain_of(const Layout& l) {
  return std::max<int64_t>(1, l.dsts * kEdgesPerTask / std::max<int64_t>(l.edges, 1));
}

// Relation r's summed rows [H, its destinations, in] and its map W_r as [H, C, in].
at::Tensor sums_of(const Layout& l, const at::Tensor& sums, int64_t r) {
  return sums.narrow(0, l.sum_offset[r], l.heads * l.dst_count[l.tail[r]] * l.in)
      .view({l.heads, l.dst_count[l.tail[r]], l.in});
}

at::Tensor map_of(const Layout& l, const at::Tensor& weight, int64_t r) {
  return weight.select(0, r).view({l.heads, l.channels, l.in});
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rgat_conv(
    const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src, const at::Tensor& att_dst,
    const at::Tensor& bias, const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_types,
    const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types, bool concat,
    double negative_slope) {
  const Layout l =
      layout_of(x, weight, att_src, indptr, indices, edge_types, node_types, relation_types, num_types, true);
  const int64_t R = l.relations, H = l.heads, C = l.channels, in = l.in, n = l.dsts, width = concat ? H * C : C;
  check_cpu(att_dst, at::kFloat, 3, "att_dst");
  check_cpu(bias, at::kFloat, 2, "bias");
  TORCH_CHECK(att_dst.sizes() == att_src.sizes() && bias.size(0) == R && bias.size(1) == width,
              "rgat_conv: att_dst or bias does not fit the layer");
  at::Tensor folded_src = fold(l, weight, att_src);
  at::Tensor folded_dst = fold(l, weight, att_dst);
  at::Tensor score_dst = at::mm(x.narrow(0, 0, n), folded_dst.t());  // [n, R * H]
  at::Tensor alpha = at::empty({l.edges, H}, x.options());
  at::Tensor score = at::empty({l.edges, H}, x.options());  // before the LeakyReLU
  at::Tensor sums = at::empty({l.sum_floats}, x.options());
  const float* xs = x.data_ptr<float>();
  const float* fs = folded_src.data_ptr<float>();
  const float* sd = score_dst.data_ptr<float>();
  const int64_t* off = indptr.data_ptr<int64_t>();
  const int64_t* src = indices.data_ptr<int64_t>();
  const int64_t* rel = edge_types.data_ptr<int64_t>();
  const int64_t* nt = node_types.data_ptr<int64_t>();
  float* a = alpha.data_ptr<float>();
  float* sc = score.data_ptr<float>();
  float* sm = sums.data_ptr<float>();
  const auto slope = static_cast<float>(negative_slope);
  at::parallel_for(0, n, grain_of(l), [&](int64_t begin, int64_t end) {
    std::vector<float> peak(R * H), total(R * H);
    for (int64_t v = begin; v < end; ++v) {
      for (int64_t r = 0; r < R; ++r) {  // this destination's rows of every relation ending at its type
        if (l.tail[r] != nt[v]) continue;
        for (int64_t h = 0; h < H; ++h) std::fill_n(l.sums_of(sm, r, h, v), in, 0.0f);
      }
      std::fill(peak.begin(), peak.end(), -std::numeric_limits<float>::infinity());
      std::fill(total.begin(), total.end(), 0.0f);
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        const float* row = xs + src[e] * in;
        for (int64_t h = 0; h < H; ++h) {
          const float z = dot(row, fs + (r * H + h) * in, in) + sd[v * R * H + r * H + h];
          sc[e * H + h] = z;
          const float activated = z > 0.0f ? z : z * slope;
          peak[r * H + h] = std::max(peak[r * H + h], activated);
        }
      }
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        for (int64_t h = 0; h < H; ++h) {
          const float z = sc[e * H + h];
          const float weight_e = std::exp((z > 0.0f ? z : z * slope) - peak[r * H + h]);
          a[e * H + h] = weight_e;
          total[r * H + h] += weight_e;
        }
      }
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        const float* row = xs + src[e] * in;
        for (int64_t h = 0; h < H; ++h) {
          const float w = a[e * H + h] / std::max(total[r * H + h], std::numeric_limits<float>::min());
          a[e * H + h] = w;
          add_scaled(l.sums_of(sm, r, h, v), row, w, in);
        }
      }
    }
  });
  // each relation's summed rows through its map, one batched product over the heads, into its destinations
  at::Tensor messages = at::zeros({n, H, C}, x.options());
  float* msg = messages.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) {
    const auto& dsts = l.dsts_of[l.tail[r]];
    if (dsts.empty()) continue;
    at::Tensor mapped = at::bmm(sums_of(l, sums, r), map_of(l, weight, r).transpose(1, 2));  // [H, dsts, C]
    const float* mp = mapped.data_ptr<float>();
    const auto count = static_cast<int64_t>(dsts.size());
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t p = 0; p < count; ++p) {
        float* m = msg + (dsts[p] * H + h) * C;
        const float* from = mp + (h * count + p) * C;
        for (int64_t c = 0; c < C; ++c) m[c] += from[c];
      }
    }
  }
  at::Tensor out = concat ? messages.view({n, width}) : messages.mean(1);
  std::vector<float> type_bias(num_types * width, 0.0f);  // the biases of the relations ending at each type
  const float* b = bias.data_ptr<float>();
  for (int64_t r = 0; r < R; ++r) add_scaled(type_bias.data() + l.tail[r] * width, b + r * width, 1.0f, width);
  float* o = out.data_ptr<float>();
  for (int64_t v = 0; v < n; ++v) add_scaled(o + v * width, type_bias.data() + nt[v] * width, 1.0f, width);
  return {out, alpha, score, score_dst, folded_src, folded_dst, sums};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> rgat_conv_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& att_src,
    const at::Tensor& att_dst, const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& edge_types,
    const at::Tensor& node_types, const at::Tensor& relation_types, int64_t num_types, bool concat,
    double negative_slope, const at::Tensor& alpha, const at::Tensor& score, const at::Tensor& score_dst,
    const at::Tensor& folded_src, const at::Tensor& folded_dst, const at::Tensor& sums) {
  // the forward checked these edges (the same tensors, saved): not again
  const Layout l =
      layout_of(x, weight, att_src, indptr, indices, edge_types, node_types, relation_types, num_types, false);
  const int64_t R = l.relations, H = l.heads, C = l.channels, in = l.in, n = l.dsts, E = l.edges;
  const int64_t width = concat ? H * C : C;
  check_cpu(grad_out, at::kFloat, 2, "grad_out");
  TORCH_CHECK(grad_out.size(0) == n && grad_out.size(1) == width && alpha.numel() == E * H &&
                  score.numel() == E * H && sums.numel() == l.sum_floats,
              "rgat_conv_backward: saved tensors do not fit the layer");
  const int64_t* nt = node_types.data_ptr<int64_t>();
  const float* g = grad_out.data_ptr<float>();
  // biases: each relation's gets the gradient of the destinations of its tail type
  std::vector<float> type_grad(num_types * width, 0.0f);
  for (int64_t v = 0; v < n; ++v) add_scaled(type_grad.data() + nt[v] * width, g + v * width, 1.0f, width);
  at::Tensor grad_bias = at::empty({R, width}, grad_out.options());
  for (int64_t r = 0; r < R; ++r) {
    std::copy_n(type_grad.data() + l.tail[r] * width, width, grad_bias.data_ptr<float>() + r * width);
  }
  // the maps: per relation, the gradient of its destinations' messages, [H, dsts, C]
  const float head_share = concat ? 1.0f : 1.0f / static_cast<float>(H);  // the mean over heads
  at::Tensor grad_weight = at::zeros_like(weight);
  at::Tensor grad_sums = at::empty_like(sums);
  for (int64_t r = 0; r < R; ++r) {
    const auto& dsts = l.dsts_of[l.tail[r]];
    if (dsts.empty()) continue;
    const auto count = static_cast<int64_t>(dsts.size());
    at::Tensor grad_mapped = at::empty({H, count, C}, grad_out.options());
    float* gm = grad_mapped.data_ptr<float>();
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t p = 0; p < count; ++p) {
        const float* from = g + dsts[p] * width + (concat ? h * C : 0);
        float* to = gm + (h * count + p) * C;
        for (int64_t c = 0; c < C; ++c) to[c] = from[c] * head_share;
      }
    }
    at::Tensor grad_rows = sums_of(l, grad_sums, r);
    at::bmm_out(grad_rows, grad_mapped, map_of(l, weight, r));  // [H, dsts, in]
    map_of(l, grad_weight, r).baddbmm_(grad_mapped.transpose(1, 2), sums_of(l, sums, r));  // [H, C, in]
  }
  // the attention: one pass per destination; each edge's gradient row for its source, summed after
  at::Tensor grad_score_dst = at::zeros_like(score_dst);  // [n, R * H]
  at::Tensor grad_z = at::empty({E, H}, x.options());
  at::Tensor edge_grad = at::empty({E, in}, x.options());
  const float* xs = x.data_ptr<float>();
  const float* fs = folded_src.data_ptr<float>();
  const float* a = alpha.data_ptr<float>();
  const float* sc = score.data_ptr<float>();
  const float* gs = grad_sums.data_ptr<float>();
  const int64_t* off = indptr.data_ptr<int64_t>();
  const int64_t* src = indices.data_ptr<int64_t>();
  const int64_t* rel = edge_types.data_ptr<int64_t>();
  float* gsd = grad_score_dst.data_ptr<float>();
  float* gz = grad_z.data_ptr<float>();
  float* eg = edge_grad.data_ptr<float>();
  const auto slope = static_cast<float>(negative_slope);
  at::parallel_for(0, n, grain_of(l), [&](int64_t begin, int64_t end) {
    std::vector<float> weighted(R * H);  // per (relation, head): sum over its edges of alpha * grad_alpha
    for (int64_t v = begin; v < end; ++v) {
      std::fill(weighted.begin(), weighted.end(), 0.0f);
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {  // grad_alpha, kept in grad_z for now
        const int64_t r = rel[e];
        const float* row = xs + src[e] * in;
        for (int64_t h = 0; h < H; ++h) {
          const float grad_alpha = dot(l.sums_of(gs, r, h, v), row, in);
          gz[e * H + h] = grad_alpha;
          weighted[r * H + h] += a[e * H + h] * grad_alpha;
        }
      }
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        float* to = eg + e * in;
        std::fill_n(to, in, 0.0f);
        for (int64_t h = 0; h < H; ++h) {
          const float z = sc[e * H + h];
          const float grad = a[e * H + h] * (gz[e * H + h] - weighted[r * H + h]) * (z > 0.0f ? 1.0f : slope);
          gz[e * H + h] = grad;
          gsd[v * R * H + r * H + h] += grad;
          add_scaled(to, l.sums_of(gs, r, h, v), a[e * H + h], in);
          add_scaled(to, fs + (r * H + h) * in, grad, in);
        }
      }
    }
  });
  at::Tensor grad_x = at::zeros_like(x);
  float* gx = grad_x.data_ptr<float>();
  for (int64_t e = 0; e < E; ++e) add_scaled(gx + src[e] * in, eg + e * in, 1.0f, in);  // into shared rows
  grad_x.narrow(0, 0, n).addmm_(grad_score_dst, folded_dst);
  at::Tensor grad_folded_dst = at::mm(grad_score_dst.t(), x.narrow(0, 0, n));  // [R * H, in]
  at::Tensor grad_folded_src = at::zeros_like(folded_src);
  float* gfs = grad_folded_src.data_ptr<float>();
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r = rel[e];
    for (int64_t h = 0; h < H; ++h) add_scaled(gfs + (r * H + h) * in, xs + src[e] * in, gz[e * H + h], in);
  }
  at::Tensor grad_att_src = unfold(l, weight, att_src, grad_folded_src, grad_weight);
  at::Tensor grad_att_dst = unfold(l, weight, att_dst, grad_folded_dst, grad_weight);
  return {grad_x, grad_weight, grad_att_src, grad_att_dst, grad_bias};
}

}  // namespace graphtier
