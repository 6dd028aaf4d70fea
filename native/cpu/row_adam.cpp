// One lazy AdamW step on some rows of a table (launcher/runtime/row_adam.py has the contract and the
// torch fallback it is tested against): the gradient rows of a row id given more than once are summed
// first (in the order given); then, for each distinct row r, with g its summed gradient row,
//
//   steps[r] += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  w *= 1 - lr wd;
//   w -= lr (m / (1 - b1^steps[r])) / (sqrt(v / (1 - b2^steps[r])) + eps)
//
// With `check_finite`, a summed gradient holding a NaN or an infinity stops the step before any row
// changes (the result is -1); otherwise the result is the number of distinct rows updated.
//
// The fallback runs this as some twenty torch ops (a sparse gradient's coalesce, the finiteness check,
// the gathers and scatters of the update), each a pass of its own and most a thread wake-up; on the few
// hundred rows of a mini-batch those overheads were the whole cost. Here it is a sort of the ids, a sum
// of repeated rows, a check and one pass over the rows, parallel over them (no two tasks write one row).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "graphtier/cpu_clones.h"
#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kValuesPerTask = 1 << 14;  // row values updated per parallel task

// The update of one row of `width` values (the formula above), its bias corrections given.
GRAPHTIER_CPU_CLONES
void update_row(float* w, float* m, float* v, const float* g, int64_t width, float b1, float b2, float bias1,
                float bias2, float step_size, float epsilon, float shrink) {
  for (int64_t k = 0; k < width; ++k) {
    m[k] = b1 * m[k] + (1.0f - b1) * g[k];
    v[k] = b2 * v[k] + (1.0f - b2) * g[k] * g[k];
    w[k] = w[k] * shrink - step_size * (m[k] / bias1) / (std::sqrt(v[k] / bias2) + epsilon);
  }
}

}  // namespace

int64_t row_adam_(at::Tensor& weight, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, at::Tensor& steps,
                  const at::Tensor& rows, const at::Tensor& grad, double lr, double beta1, double beta2, double eps,
                  double weight_decay, bool check_finite) {
  for (const at::Tensor* t : {&weight, &exp_avg, &exp_avg_sq}) {
    TORCH_CHECK(t->device().is_cpu() && t->is_contiguous() && t->scalar_type() == at::kFloat &&
                    t->dim() == 2 && t->sizes() == weight.sizes(),
                "row_adam_: the table and its moments must be contiguous float32 of one shape");
  }
  TORCH_CHECK(steps.is_contiguous() && steps.scalar_type() == at::kLong && steps.dim() == 1 &&
                  steps.numel() == weight.size(0),
              "row_adam_: steps must be int64, one per row");
  TORCH_CHECK(rows.is_contiguous() && rows.scalar_type() == at::kLong && rows.dim() == 1,
              "row_adam_: rows must be contiguous int64");
  const int64_t count = rows.numel(), width = weight.size(1);
  TORCH_CHECK(grad.is_contiguous() && grad.scalar_type() == at::kFloat && grad.dim() == 2 &&
                  grad.size(0) == count && grad.size(1) == width,
              "row_adam_: grad must be contiguous float32 [len(rows), width]");
  const int64_t* r = rows.data_ptr<int64_t>();
  const auto table_rows = static_cast<uint64_t>(weight.size(0));
  for (int64_t i = 0; i < count; ++i) {
    TORCH_CHECK(static_cast<uint64_t>(r[i]) < table_rows, "row_adam_: a row is out of range");
  }
  const float* g = grad.data_ptr<float>();
  // the distinct rows, ascending, each with its gradient row: the given one, or the sum of its repeats
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r[a] < r[b]; });
  std::vector<int64_t> distinct;
  std::vector<const float*> gradient;
  std::vector<float> sums;  // the summed rows of repeated ids, in the order of `distinct`
  std::vector<int64_t> sum_of;  // per distinct row: its row in `sums`, or -1
  for (int64_t j = 0; j < count;) {
    int64_t end = j + 1;
    while (end < count && r[order[end]] == r[order[j]]) ++end;
    distinct.push_back(r[order[j]]);
    if (end - j == 1) {
      gradient.push_back(g + order[j] * width);
      sum_of.push_back(-1);
    } else {
      sum_of.push_back(static_cast<int64_t>(sums.size()) / width);
      sums.insert(sums.end(), g + order[j] * width, g + (order[j] + 1) * width);
      float* sum = sums.data() + sums.size() - width;
      for (int64_t k = j + 1; k < end; ++k) {
        const float* more = g + order[k] * width;
        for (int64_t c = 0; c < width; ++c) sum[c] += more[c];
      }
      gradient.push_back(nullptr);
    }
    j = end;
  }
  for (size_t d = 0; d < distinct.size(); ++d) {  // the sums' storage is final: point at it
    if (sum_of[d] >= 0) gradient[d] = sums.data() + sum_of[d] * width;
  }
  const auto kept = static_cast<int64_t>(distinct.size());
  if (check_finite) {
    for (int64_t d = 0; d < kept; ++d) {
      const float* row = gradient[d];
      float probe = 0.0f;  // NaN or an infinity in the row makes the product non-finite
      for (int64_t c = 0; c < width; ++c) probe += row[c] * 0.0f;
      if (!std::isfinite(probe)) return -1;
    }
  }
  float* w = weight.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  int64_t* s = steps.data_ptr<int64_t>();
  const auto b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const auto step_size = static_cast<float>(lr), epsilon = static_cast<float>(eps);
  const auto shrink = static_cast<float>(1.0 - lr * weight_decay);
  const int64_t grain = std::max<int64_t>(1, kValuesPerTask / std::max<int64_t>(width, 1));
  at::parallel_for(0, kept, grain, [&](int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      const int64_t row = distinct[d];
      const int64_t t = ++s[row];
      const float bias1 = 1.0f - std::pow(b1, static_cast<float>(t));
      const float bias2 = 1.0f - std::pow(b2, static_cast<float>(t));
      update_row(w + row * width, m + row * width, v + row * width, gradient[d], width, b1, b2, bias1, bias2,
                 step_size, epsilon, weight_decay != 0.0 ? shrink : 1.0f);
    }
  });
  return kept;
}

}  // namespace graphtier
