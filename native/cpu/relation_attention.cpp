// R-GAT's attention over one sampled block, every relation at once (launcher/runtime/models/
// block_ops.py has the contract and the torch fallback each op is tested against):
//
//   score[e, h] = LeakyReLU(table[row[e], h] . att_src[rel[e], h] + score_dst[v, rel[e], h])
//   alpha[e, h] = softmax of score over v's in-edges of relation rel[e]
//   out[v, h]   = sum over v's in-edges e of alpha[e, h] * table[row[e], h]
//
// for each destination v of the CSC block (its in-edges are [indptr[v], indptr[v + 1])). Torch
// runs this as a dozen ops a layer, each with its own pass over the edges and its own autograd
// node; on the small blocks of a sampled mini-batch the step is made of those ops' overheads.
// Here it is one pass per destination (parallel over destinations, no atomics), and its backward
// one pass per destination plus one per head for the sums into shared rows.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kEdgesPerTask = 2048;  // work per parallel task, in edges

struct Shape {
  int64_t num_dst, edges, relations, heads, channels;
};

// Last-line checks (the Python wrapper validates first): layouts, dtypes and agreeing shapes.
Shape check(const at::Tensor& table, const at::Tensor& edge_row, const at::Tensor& indptr,
            const at::Tensor& relation, const at::Tensor& att_src, const at::Tensor& score_dst) {
  for (const at::Tensor* t : {&table, &att_src, &score_dst}) {
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kFloat,
                "relation_attention: float tensors must be contiguous float32 on the CPU");
  }
  for (const at::Tensor* t : {&edge_row, &indptr, &relation}) {
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kLong &&
                    t->dim() == 1,
                "relation_attention: index tensors must be contiguous 1-D int64 on the CPU");
  }
  TORCH_CHECK(table.dim() == 3 && att_src.dim() == 3 && score_dst.dim() == 3,
              "relation_attention: table, att_src and score_dst must be 3-D");
  const Shape s{indptr.numel() - 1, edge_row.numel(), att_src.size(0), table.size(1),
                table.size(2)};
  TORCH_CHECK(s.num_dst >= 0 && relation.numel() == s.edges && att_src.size(1) == s.heads &&
                  att_src.size(2) == s.channels && score_dst.size(0) == s.num_dst &&
                  score_dst.size(1) == s.relations && score_dst.size(2) == s.heads,
              "relation_attention: shapes disagree");
  return s;
}

// The forward's last-line check of the index data (the backward gets the tensors the forward saved):
// indptr runs from 0 to the edge count without decreasing, each edge's row and relation in range.
void check_indices(const Shape& s, const at::Tensor& table, const at::Tensor& edge_row,
                   const at::Tensor& indptr, const at::Tensor& relation) {
  const int64_t* off = indptr.data_ptr<int64_t>();
  TORCH_CHECK(off[0] == 0 && off[s.num_dst] == s.edges, "relation_attention: indptr must run 0..edges");
  for (int64_t v = 0; v < s.num_dst; ++v) {
    TORCH_CHECK(off[v] <= off[v + 1], "relation_attention: indptr decreases");
  }
  const int64_t* row = edge_row.data_ptr<int64_t>();
  const int64_t* rel = relation.data_ptr<int64_t>();
  const auto rows = static_cast<uint64_t>(table.size(0));
  const auto relations = static_cast<uint64_t>(s.relations);
  for (int64_t e = 0; e < s.edges; ++e) {
    TORCH_CHECK(static_cast<uint64_t>(row[e]) < rows && static_cast<uint64_t>(rel[e]) < relations,
                "relation_attention: an edge's row or relation is out of range");
  }
}

int64_t grain_of(const Shape& s) {
  return std::max<int64_t>(1, s.num_dst * kEdgesPerTask / std::max<int64_t>(s.edges, 1));
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> relation_attention(
    const at::Tensor& table, const at::Tensor& edge_row, const at::Tensor& indptr,
    const at::Tensor& relation, const at::Tensor& att_src, const at::Tensor& score_dst,
    double negative_slope) {
  const Shape s = check(table, edge_row, indptr, relation, att_src, score_dst);
  check_indices(s, table, edge_row, indptr, relation);
  const int64_t H = s.heads, C = s.channels, R = s.relations;
  at::Tensor out = at::zeros({s.num_dst, H, C}, table.options());
  at::Tensor alpha = at::empty({s.edges, H}, table.options());
  at::Tensor score = at::empty({s.edges, H}, table.options());
  const float* tab = table.data_ptr<float>();
  const float* att = att_src.data_ptr<float>();
  const float* sdst = score_dst.data_ptr<float>();
  const int64_t* off = indptr.data_ptr<int64_t>();
  const int64_t* row = edge_row.data_ptr<int64_t>();
  const int64_t* rel = relation.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  float* a = alpha.data_ptr<float>();
  float* sc = score.data_ptr<float>();
  const auto slope = static_cast<float>(negative_slope);
  at::parallel_for(0, s.num_dst, grain_of(s), [&](int64_t begin, int64_t end) {
    std::vector<float> peak(R * H), total(R * H);
    for (int64_t v = begin; v < end; ++v) {
      std::fill(peak.begin(), peak.end(), -std::numeric_limits<float>::infinity());
      std::fill(total.begin(), total.end(), 0.0f);
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        const float* src = tab + row[e] * H * C;
        for (int64_t h = 0; h < H; ++h) {
          const float* w = att + (r * H + h) * C;
          const float* m = src + h * C;
          float dot = 0.0f;
          for (int64_t c = 0; c < C; ++c) dot += m[c] * w[c];
          float z = dot + sdst[(v * R + r) * H + h];
          z = z > 0.0f ? z : z * slope;
          sc[e * H + h] = z;
          peak[r * H + h] = std::max(peak[r * H + h], z);
        }
      }
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        for (int64_t h = 0; h < H; ++h) {
          const float x = std::exp(sc[e * H + h] - peak[r * H + h]);
          a[e * H + h] = x;
          total[r * H + h] += x;
        }
      }
      float* dst = o + v * H * C;
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        const float* src = tab + row[e] * H * C;
        for (int64_t h = 0; h < H; ++h) {
          const float w = a[e * H + h] / std::max(total[r * H + h], std::numeric_limits<float>::min());
          a[e * H + h] = w;
          const float* m = src + h * C;
          float* d = dst + h * C;
          for (int64_t c = 0; c < C; ++c) d[c] += w * m[c];
        }
      }
    }
  });
  return {out, alpha, score};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> relation_attention_backward(
    const at::Tensor& grad_out, const at::Tensor& table, const at::Tensor& edge_row,
    const at::Tensor& indptr, const at::Tensor& relation, const at::Tensor& att_src,
    const at::Tensor& score_dst, const at::Tensor& alpha, const at::Tensor& score,
    double negative_slope) {
  const Shape s = check(table, edge_row, indptr, relation, att_src, score_dst);
  const int64_t H = s.heads, C = s.channels, R = s.relations;
  for (const at::Tensor* t : {&grad_out, &alpha, &score}) {
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kFloat,
                "relation_attention_backward: float tensors must be contiguous float32");
  }
  TORCH_CHECK(grad_out.numel() == s.num_dst * H * C && alpha.numel() == s.edges * H &&
                  score.numel() == s.edges * H,
              "relation_attention_backward: shapes disagree");
  at::Tensor grad_table = at::zeros_like(table);
  at::Tensor grad_att = at::zeros_like(att_src);
  at::Tensor grad_sdst = at::zeros_like(score_dst);
  at::Tensor grad_z = at::empty({s.edges, H}, table.options());  // d loss / d pre-activation score
  const float* go = grad_out.data_ptr<float>();
  const float* tab = table.data_ptr<float>();
  const float* att = att_src.data_ptr<float>();
  const float* a = alpha.data_ptr<float>();
  const float* sc = score.data_ptr<float>();
  const int64_t* off = indptr.data_ptr<int64_t>();
  const int64_t* row = edge_row.data_ptr<int64_t>();
  const int64_t* rel = relation.data_ptr<int64_t>();
  float* gz = grad_z.data_ptr<float>();
  float* gs = grad_sdst.data_ptr<float>();
  float* gt = grad_table.data_ptr<float>();
  float* ga = grad_att.data_ptr<float>();
  const auto slope = static_cast<float>(negative_slope);
  // per destination: d alpha, the softmax's and the LeakyReLU's backward, the destination scores'
  at::parallel_for(0, s.num_dst, grain_of(s), [&](int64_t begin, int64_t end) {
    std::vector<float> weighted(R * H);  // per (relation, head): sum of alpha * d alpha
    for (int64_t v = begin; v < end; ++v) {
      std::fill(weighted.begin(), weighted.end(), 0.0f);
      const float* g = go + v * H * C;
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const float* src = tab + row[e] * H * C;
        for (int64_t h = 0; h < H; ++h) {
          const float* m = src + h * C;
          const float* gh = g + h * C;
          float dot = 0.0f;
          for (int64_t c = 0; c < C; ++c) dot += gh[c] * m[c];
          gz[e * H + h] = dot;  // d alpha for now
          weighted[rel[e] * H + h] += a[e * H + h] * dot;
        }
      }
      for (int64_t e = off[v]; e < off[v + 1]; ++e) {
        const int64_t r = rel[e];
        for (int64_t h = 0; h < H; ++h) {
          const float d_score = a[e * H + h] * (gz[e * H + h] - weighted[r * H + h]);
          const float d_z = sc[e * H + h] > 0.0f ? d_score : d_score * slope;
          gz[e * H + h] = d_z;
          gs[(v * R + r) * H + h] += d_z;
        }
      }
    }
  });
  // the sums into rows that edges share (table rows, the relations' attention vectors), one head
  // per task: a task owns its head's columns of every row, so no two tasks write one float
  at::parallel_for(0, H, 1, [&](int64_t begin, int64_t end) {
    for (int64_t h = begin; h < end; ++h) {
      for (int64_t v = 0; v < s.num_dst; ++v) {
        const float* g = go + (v * H + h) * C;
        for (int64_t e = off[v]; e < off[v + 1]; ++e) {
          const int64_t r = rel[e];
          const float w = a[e * H + h], d_z = gz[e * H + h];
          const float* m = tab + (row[e] * H + h) * C;
          const float* at_rh = att + (r * H + h) * C;
          float* gm = gt + (row[e] * H + h) * C;
          float* gat = ga + (r * H + h) * C;
          for (int64_t c = 0; c < C; ++c) {
            gm[c] += w * g[c] + d_z * at_rh[c];
            gat[c] += d_z * m[c];
          }
        }
      }
    }
  });
  return {grad_table, grad_att, grad_sdst};
}

}  // namespace graphtier
