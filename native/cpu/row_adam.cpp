// One lazy AdamW step on some rows of a table (launcher/runtime/row_adam.py has the contract and the
// torch fallback it is tested against): for each distinct row r of `rows`, with g its gradient row,
//
//   steps[r] += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  w *= 1 - lr wd;
//   w -= lr (m / (1 - b1^steps[r])) / (sqrt(v / (1 - b2^steps[r])) + eps)
//
// The fallback runs this as some fifteen torch ops, each gathering or scattering the rows again;
// here it is one pass over the rows, parallel over them (the rows are distinct: no two tasks write
// one row).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kValuesPerTask = 1 << 14;  // row values updated per parallel task

}  // namespace

void row_adam_(at::Tensor& weight, at::Tensor& exp_avg, at::Tensor& exp_avg_sq, at::Tensor& steps,
               const at::Tensor& rows, const at::Tensor& grad, double lr, double beta1, double beta2,
               double eps, double weight_decay) {
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
  float* w = weight.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  int64_t* s = steps.data_ptr<int64_t>();
  const float* g = grad.data_ptr<float>();
  const auto b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const auto step_size = static_cast<float>(lr), epsilon = static_cast<float>(eps);
  const auto shrink = static_cast<float>(1.0 - lr * weight_decay);
  const int64_t grain = std::max<int64_t>(1, kValuesPerTask / std::max<int64_t>(width, 1));
  at::parallel_for(0, count, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t row = r[i];
      const int64_t t = ++s[row];
      const float bias1 = 1.0f - std::pow(b1, static_cast<float>(t));
      const float bias2 = 1.0f - std::pow(b2, static_cast<float>(t));
      float* wr = w + row * width;
      float* mr = m + row * width;
      float* vr = v + row * width;
      const float* gr = g + i * width;
      for (int64_t k = 0; k < width; ++k) {
        mr[k] = b1 * mr[k] + (1.0f - b1) * gr[k];
        vr[k] = b2 * vr[k] + (1.0f - b2) * gr[k] * gr[k];
        const float value = weight_decay != 0.0 ? wr[k] * shrink : wr[k];
        wr[k] = value - step_size * (mr[k] / bias1) / (std::sqrt(vr[k] / bias2) + epsilon);
      }
    }
  });
}

}  // namespace graphtier
