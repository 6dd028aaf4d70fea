// A linear map of mostly-zero input rows (launcher/runtime/models/sparse_input.py has the contract
// and the torch fallback each op is tested against): out = x @ weight^T + bias, and the weight's
// gradient grad_out^T @ x, each over x's non-zeros only.
//
// Bag-of-words features (ACM's papers: 1,902 columns, ~5% of a sampled batch's values non-zero)
// make the input layer the largest matrix product of a heterogeneous step, nearly all of it
// multiplying zeros. Each row's values are compared with zero eight at a time (a mispredicted
// branch per value cost more than the products) and each non-zero adds one contiguous row:
// `out_dim` multiply-adds. With few rows (a thread's outputs fit the cache) the columns go block by
// block: a block's weights (forward) or gradient rows (backward) laid out one column to a row in a
// small buffer, so nothing the size of the weight is transposed or zero-filled, which on a machine
// of little memory bandwidth cost as much as the products. With many rows each row is finished at
// once over the weight transposed once, and the gradient is summed transposed, a thread owning a
// range of input columns. Both orders add a row's, or a column's, terms in the same order, so the
// results do not depend on the path. The input needs no gradient (features are data). The
// multiply-adds are compiled twice, for AVX2 with FMA and for the baseline x86-64, and the loader
// picks the one the CPU runs (GCC's target_clones).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "graphtier/ops.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define GRAPHTIER_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GRAPHTIER_CPU_CLONES
#endif

namespace graphtier {
namespace {

constexpr int64_t kBlockedRows = 512;     // rows per thread up to which the column blocks pay
constexpr int64_t kRowsPerTask = 32;      // output rows per parallel task, at least
constexpr int64_t kColumnsPerTask = 256;  // transposed-gradient rows per parallel task, many rows
constexpr int64_t kTile = 32;             // side of a transposed tile
constexpr int64_t kForwardColumns = 64;   // input columns whose weights the forward transposes at once
constexpr int64_t kBlockColumns = 16;     // input columns whose gradient rows are summed in the cache
constexpr int64_t kBlocksPerTask = 8;      // such blocks per parallel task

// y[0:n] += a * w[0:n]; the pointers never alias.
inline void add_scaled(float* __restrict__ y, const float* __restrict__ w, float a, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] += a * w[k];
}

// Calls visit(c, value) for every non-zero value of row[0:n], in column order: eight values are
// compared with zero at once and only the set bits of the result are visited (zeros of either sign
// are skipped; a NaN is visited, so it reaches the output as through the dense product).
template <typename Visit>
inline void for_each_non_zero(const float* row, int64_t n, Visit&& visit) {
  int64_t c = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps();
  for (; c + 8 <= n; c += 8) {
    unsigned mask = static_cast<unsigned>(_mm_movemask_ps(_mm_cmpneq_ps(_mm_loadu_ps(row + c), zero))) |
                    static_cast<unsigned>(_mm_movemask_ps(_mm_cmpneq_ps(_mm_loadu_ps(row + c + 4), zero)))
                        << 4;
    while (mask != 0) {
      const int k = __builtin_ctz(mask);
      visit(c + k, row[c + k]);
      mask &= mask - 1;
    }
  }
#endif
  for (; c < n; ++c) {
    if (row[c] != 0.0f) visit(c, row[c]);
  }
}

// out[i] += sum over x[i, c0:c0 + width]'s non-zeros c of x[i, c] * weight[:, c], rows [begin, end):
// the block's weights first transposed into `scratch` ([width, out_dim], in the cache), so that each
// non-zero adds one contiguous row.
GRAPHTIER_CPU_CLONES
void forward_block(const float* xs, const float* weight, float* out, float* scratch, int64_t begin,
                   int64_t end, int64_t c0, int64_t width, int64_t in_dim, int64_t out_dim) {
  for (int64_t k = 0; k < out_dim; ++k) {
    const float* row = weight + k * in_dim + c0;
    for (int64_t c = 0; c < width; ++c) scratch[c * out_dim + k] = row[c];
  }
  for (int64_t i = begin; i < end; ++i) {
    float* y = out + i * out_dim;
    for_each_non_zero(xs + i * in_dim + c0, width, [&](int64_t c, float value) {
      add_scaled(y, scratch + c * out_dim, value, out_dim);
    });
  }
}

// grad_weight[:, c0:c0 + width] = sum over rows i of grad_out[i]^T x[i, c0:c0 + width], over x's
// non-zeros: summed into `scratch` ([width, out_dim], a column's gradient in a row, in the cache),
// then written into the gradient's columns once.
GRAPHTIER_CPU_CLONES
void grad_block(const float* xs, const float* grad_out, float* grad_weight, float* scratch,
                int64_t rows, int64_t c0, int64_t width, int64_t in_dim, int64_t out_dim) {
  std::fill(scratch, scratch + width * out_dim, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    const float* g = grad_out + i * out_dim;
    for_each_non_zero(xs + i * in_dim + c0, width, [&](int64_t c, float value) {
      add_scaled(scratch + c * out_dim, g, value, out_dim);
    });
  }
  for (int64_t k = 0; k < out_dim; ++k) {
    float* row = grad_weight + k * in_dim + c0;
    for (int64_t c = 0; c < width; ++c) row[c] = scratch[c * out_dim + k];
  }
}

// out[i] = bias + sum over x[i]'s non-zeros c of x[i, c] * columns[c], rows [begin, end).
GRAPHTIER_CPU_CLONES
void forward_rows(const float* xs, const float* columns, const float* bias, float* out,
                  int64_t begin, int64_t end, int64_t in_dim, int64_t out_dim) {
  for (int64_t i = begin; i < end; ++i) {
    float* y = out + i * out_dim;
    std::copy(bias, bias + out_dim, y);
    for_each_non_zero(xs + i * in_dim, in_dim, [&](int64_t c, float value) {
      add_scaled(y, columns + c * out_dim, value, out_dim);
    });
  }
}

// grad_columns[c] += x[i, c] * grad_out[i] for every row i and non-zero column c in [begin, end).
GRAPHTIER_CPU_CLONES
void grad_columns_of(const float* xs, const float* grad_out, float* grad_columns, int64_t rows,
                     int64_t begin, int64_t end, int64_t in_dim, int64_t out_dim) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* g = grad_out + i * out_dim;
    for_each_non_zero(xs + i * in_dim + begin, end - begin, [&](int64_t c, float value) {
      add_scaled(grad_columns + (begin + c) * out_dim, g, value, out_dim);
    });
  }
}

// dst[j, i] = src[i, j] for a [rows, cols] src, tile by tile, tiles split among threads.
void transpose_into(const float* src, float* dst, int64_t rows, int64_t cols) {
  const int64_t tile_rows = (rows + kTile - 1) / kTile;
  at::parallel_for(0, tile_rows, 4, [&](int64_t begin, int64_t end) {
    for (int64_t ti = begin; ti < end; ++ti) {
      const int64_t i0 = ti * kTile, i1 = std::min(rows, i0 + kTile);
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = std::min(cols, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i) {
          for (int64_t j = j0; j < j1; ++j) dst[j * rows + i] = src[i * cols + j];
        }
      }
    }
  });
}

void check_float_matrix(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 2 && t.is_contiguous() &&
                  t.scalar_type() == at::kFloat,
              "sparse_input_linear: matrices must be contiguous 2-D float32 on the CPU");
}

}  // namespace

at::Tensor sparse_input_linear(const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias) {
  check_float_matrix(x);
  check_float_matrix(weight);
  const int64_t rows = x.size(0), in_dim = x.size(1), out_dim = weight.size(0);
  TORCH_CHECK(weight.size(1) == in_dim && bias.device().is_cpu() && bias.is_contiguous() &&
                  bias.scalar_type() == at::kFloat && bias.dim() == 1 && bias.numel() == out_dim,
              "sparse_input_linear: shapes disagree");
  at::Tensor out = at::empty({rows, out_dim}, x.options());
  const float* xs = x.data_ptr<float>();
  const float* w = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  float* o = out.data_ptr<float>();
  if (rows > kBlockedRows * at::get_num_threads()) {
    // many rows: a task's outputs outgrow the cache, so each row is finished at once, over the whole
    // weight transposed once (a column's weights in a row)
    at::Tensor columns = at::empty({in_dim, out_dim}, weight.options());
    transpose_into(w, columns.data_ptr<float>(), out_dim, in_dim);
    const float* wt = columns.data_ptr<float>();
    at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
      forward_rows(xs, wt, b, o, begin, end, in_dim, out_dim);
    });
    return out;
  }
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / kRowsPerTask));
  // a task owns a range of rows (in the cache) and runs every column block over them
  at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
    std::vector<float> scratch(kForwardColumns * out_dim);
    for (int64_t task = first; task < last; ++task) {
      const int64_t begin = rows * task / tasks, end = rows * (task + 1) / tasks;
      for (int64_t i = begin; i < end; ++i) std::copy(b, b + out_dim, o + i * out_dim);
      for (int64_t c0 = 0; c0 < in_dim; c0 += kForwardColumns) {
        forward_block(xs, w, o, scratch.data(), begin, end, c0, std::min(kForwardColumns, in_dim - c0),
                      in_dim, out_dim);
      }
    }
  });
  return out;
}

at::Tensor sparse_input_linear_weight_grad(const at::Tensor& grad_out, const at::Tensor& x) {
  check_float_matrix(grad_out);
  check_float_matrix(x);
  const int64_t rows = x.size(0), in_dim = x.size(1), out_dim = grad_out.size(1);
  TORCH_CHECK(grad_out.size(0) == rows, "sparse_input_linear_weight_grad: shapes disagree");
  const float* xs = x.data_ptr<float>();
  const float* g = grad_out.data_ptr<float>();
  at::Tensor grad_weight = at::empty({out_dim, in_dim}, x.options());
  if (rows > kBlockedRows * at::get_num_threads()) {
    // many rows: summed into the transposed gradient, a task owning a range of input columns, then transposed
    at::Tensor columns = at::zeros({in_dim, out_dim}, x.options());
    float* gc = columns.data_ptr<float>();
    at::parallel_for(0, in_dim, kColumnsPerTask, [&](int64_t begin, int64_t end) {
      grad_columns_of(xs, g, gc, rows, begin, end, in_dim, out_dim);
    });
    transpose_into(gc, grad_weight.data_ptr<float>(), in_dim, out_dim);
    return grad_weight;
  }
  float* gw = grad_weight.data_ptr<float>();
  // a task owns blocks of input columns: their columns of the gradient are its own
  const int64_t blocks = (in_dim + kBlockColumns - 1) / kBlockColumns;
  at::parallel_for(0, blocks, kBlocksPerTask, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(kBlockColumns * out_dim);
    for (int64_t block = begin; block < end; ++block) {
      const int64_t c0 = block * kBlockColumns;
      grad_block(xs, g, gw, scratch.data(), rows, c0, std::min(kBlockColumns, in_dim - c0), in_dim,
                 out_dim);
    }
  });
  return grad_weight;
}

}  // namespace graphtier
