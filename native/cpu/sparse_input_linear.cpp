// A linear map of mostly-zero input rows (launcher/runtime/models/sparse_input.py has the contract
// and the torch fallback each op is tested against): out = x @ weight^T + bias, and the weight's
// gradient grad_out^T @ x, each over x's non-zeros only.
//
// Bag-of-words features (ACM's papers: 1,902 columns, ~5% of a sampled batch's values non-zero)
// make the input layer the largest matrix product of a heterogeneous step, nearly all of it
// multiplying zeros. `sparse_rows` reads x and keeps its non-zeros as compressed rows (CSR:
// offsets, columns, values); the product and, in the backward, the weight's gradient run over
// those, so the dense rows are not scanned again per pass. With AVX-512 the scan takes sixteen
// values at a time without a branch (compare, then compress the kept lanes); elsewhere eight, visiting
// the set bits (a mispredicted branch per value cost more than the products). The weight is
// transposed once per call, so that each non-zero adds one contiguous row of `out_dim`
// multiply-adds (with AVX-512 into a row of outputs held in registers), and the gradient is summed
// transposed, then transposed back (a weight kept transposed instead made torch's fused Adam copy
// its gradient every step). The product is parallel over rows; the gradient over ranges of input
// columns, a thread owning its rows of the gradient and adding the terms in row order, so results
// do not depend on the number of threads. The plain multiply-adds are compiled for AVX-512, for
// AVX2 with FMA and for the baseline x86-64; the loader picks the one the CPU runs (target_clones).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "graphtier/cpu_clones.h"
#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kRowsPerTask = 16;  // output rows per parallel task of the product, at least
constexpr int64_t kTransposeBands = 4;  // bands of 8 rows per parallel task of a transpose, at least

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

// A row's non-zeros: how many (count) and their columns and values, in column order (compress).
// Zeros of either sign are skipped and a NaN is kept, so it reaches the output as through the dense
// product. With AVX-512, sixteen values at a time without a branch: a compare gives the mask, whose
// set lanes are packed and stored; otherwise eight at a time, visiting the set bits of the mask.
int64_t count_generic(const float* row, int64_t n) {
  int64_t count = 0;
  for_each_non_zero(row, n, [&](int64_t, float) { ++count; });
  return count;
}

void compress_generic(const float* row, int64_t n, int32_t* columns, float* values) {
  int64_t at = 0;
  for_each_non_zero(row, n, [&](int64_t c, float value) {
    columns[at] = static_cast<int32_t>(c);
    values[at++] = value;
  });
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRAPHTIER_X86_KERNELS 1
// Whether this CPU runs the AVX-512 kernels below (they use popcnt too), asked once.
inline bool has_avx512() {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("popcnt");
  return avx512;
}

// The lanes of x[c:c + 16] (those below n) that are not zero: "not equal, or unordered" keeps NaN.
__attribute__((target("avx512f"))) inline __mmask16 non_zero_lanes(const float* row, int64_t c, int64_t n,
                                                                    __m512* v) {
  const __mmask16 valid = n - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - c)) - 1);
  *v = _mm512_maskz_loadu_ps(valid, row + c);
  return _mm512_mask_cmp_ps_mask(valid, *v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
}

__attribute__((target("avx512f,popcnt"))) int64_t count_avx512(const float* row, int64_t n) {
  int64_t count = 0;
  __m512 v;
  for (int64_t c = 0; c < n; c += 16) count += __builtin_popcount(non_zero_lanes(row, c, n, &v));
  return count;
}

__attribute__((target("avx512f,popcnt"))) void compress_avx512(const float* row, int64_t n, int32_t* columns,
                                                                float* values) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t at = 0;
  __m512 v;
  for (int64_t c = 0; c < n; c += 16) {
    const __mmask16 keep = non_zero_lanes(row, c, n, &v);
    const int kept = __builtin_popcount(keep);
    const __mmask16 first = __mmask16((1u << kept) - 1);  // stores only the packed lanes: no overrun
    const __m512i column = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int32_t>(c)));
    _mm512_mask_storeu_ps(values + at, first, _mm512_maskz_compress_ps(keep, v));
    _mm512_mask_storeu_epi32(columns + at, first, _mm512_maskz_compress_epi32(keep, column));
    at += kept;
  }
}
#endif

using CountRow = int64_t (*)(const float*, int64_t);
using CompressRow = void (*)(const float*, int64_t, int32_t*, float*);

// The widest row scan this CPU runs.
std::pair<CountRow, CompressRow> row_scan() {
#if defined(GRAPHTIER_X86_KERNELS)
  if (has_avx512()) return {count_avx512, compress_avx512};
#endif
  return {count_generic, compress_generic};
}

// out[i] = bias + sum over row i's non-zeros (c, v) of v * weight_t[c], rows [begin, end).
GRAPHTIER_CPU_CLONES
void product_rows(const int64_t* offsets, const int32_t* columns, const float* values,
                  const float* weight_t, const float* bias, float* out, int64_t begin, int64_t end,
                  int64_t out_dim) {
  for (int64_t i = begin; i < end; ++i) {
    float* y = out + i * out_dim;
    std::copy(bias, bias + out_dim, y);
    for (int64_t k = offsets[i]; k < offsets[i + 1]; ++k) {
      add_scaled(y, weight_t + static_cast<int64_t>(columns[k]) * out_dim, values[k], out_dim);
    }
  }
}

// grad_t[c] = sum over rows i, in order, of x[i, c] * grad_out[i], for the columns c in [c0, c1):
// each row's non-zeros in the range found by bisection (a row's columns are ascending).
GRAPHTIER_CPU_CLONES
void gradient_columns(const int64_t* offsets, const int32_t* columns, const float* values,
                      const float* grad_out, float* grad_t, int64_t rows, int64_t c0, int64_t c1,
                      int64_t out_dim) {
  std::fill(grad_t + c0 * out_dim, grad_t + c1 * out_dim, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    const int32_t* first = columns + offsets[i];
    const int32_t* last = columns + offsets[i + 1];
    if (first == last || *first >= c1 || last[-1] < c0) continue;
    const float* g = grad_out + i * out_dim;
    for (const int32_t* k = std::lower_bound(first, last, static_cast<int32_t>(c0)); k < last && *k < c1;
         ++k) {
      add_scaled(grad_t + static_cast<int64_t>(*k) * out_dim, g, values[k - columns], out_dim);
    }
  }
}

#if defined(GRAPHTIER_X86_KERNELS)
// The product for out_dim == 16 * K (K <= 16) with AVX-512: a row's outputs held in K registers, so
// that each non-zero costs K loads and K multiply-adds rather than also a load and a store of its
// output row. Terms are added in the same order as above.
template <int K>
__attribute__((target("avx512f"))) void product_rows_blocked(const int64_t* offsets, const int32_t* columns,
                                                             const float* values, const float* weight_t,
                                                             const float* bias, float* out, int64_t begin,
                                                             int64_t end) {
  constexpr int64_t out_dim = 16 * K;
  for (int64_t i = begin; i < end; ++i) {
    __m512 acc[K];
    for (int j = 0; j < K; ++j) acc[j] = _mm512_loadu_ps(bias + 16 * j);
    for (int64_t k = offsets[i]; k < offsets[i + 1]; ++k) {
      const __m512 v = _mm512_set1_ps(values[k]);
      const float* w = weight_t + static_cast<int64_t>(columns[k]) * out_dim;
      for (int j = 0; j < K; ++j) acc[j] = _mm512_fmadd_ps(v, _mm512_loadu_ps(w + 16 * j), acc[j]);
    }
    for (int j = 0; j < K; ++j) _mm512_storeu_ps(out + i * out_dim + 16 * j, acc[j]);
  }
}

// The blocked product for out_dim, when out_dim is 16, 32, ..., 256 (the caller checks AVX-512).
template <int K = 16>
bool product_rows_fixed(int64_t out_dim, const int64_t* offsets, const int32_t* columns, const float* values,
                        const float* weight_t, const float* bias, float* out, int64_t begin, int64_t end) {
  if constexpr (K == 0) {
    return false;
  } else {
    if (out_dim != 16 * K) {
      return product_rows_fixed<K - 1>(out_dim, offsets, columns, values, weight_t, bias, out, begin, end);
    }
    product_rows_blocked<K>(offsets, columns, values, weight_t, bias, out, begin, end);
    return true;
  }
}

#endif

// dst[j, i] = src[i, j] for the 8 x 8 block at src[i0:i0 + 8, j0:j0 + 8]: with AVX2, eight rows loaded,
// interleaved by unpacks and lane permutes, eight rows stored.
void transpose_block_generic(const float* src, float* dst, int64_t rows, int64_t stride, int64_t i0, int64_t j0) {
  for (int64_t i = i0; i < i0 + 8; ++i) {
    for (int64_t j = j0; j < j0 + 8; ++j) dst[j * rows + i] = src[i * stride + j];
  }
}

#if defined(GRAPHTIER_X86_KERNELS)
__attribute__((target("avx2"))) void transpose_block_avx2(const float* src, float* dst, int64_t rows,
                                                          int64_t stride, int64_t i0, int64_t j0) {
  __m256 r[8], t[8];
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_ps(src + (i0 + k) * stride + j0);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    r[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(dst + (j0 + k) * rows + i0, _mm256_permute2f128_ps(r[k], r[k + 4], 0x20));
    _mm256_storeu_ps(dst + (j0 + k + 4) * rows + i0, _mm256_permute2f128_ps(r[k], r[k + 4], 0x31));
  }
}
#endif

// dst[j, i] = src[i * stride + j] for a [rows, cols] src (rows `stride` floats apart): 8 x 8 blocks, a band of 8 source rows per task
// (its reads contiguous, its writes 32 bytes a row), the edges value by value.
void transpose_into(const float* src, int64_t stride, float* dst, int64_t rows, int64_t cols) {
  auto block = transpose_block_generic;
#if defined(GRAPHTIER_X86_KERNELS)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) block = transpose_block_avx2;
#endif
  const int64_t full_rows = rows / 8 * 8, full_cols = cols / 8 * 8;
  at::parallel_for(0, full_rows / 8, kTransposeBands, [&](int64_t begin, int64_t end) {
    for (int64_t band = begin; band < end; band += 2) {  // two bands at once: whole 64-byte lines written
      for (int64_t j0 = 0; j0 < full_cols; j0 += 8) {
        block(src, dst, rows, stride, band * 8, j0);
        if (band + 1 < end) block(src, dst, rows, stride, band * 8 + 8, j0);
      }
    }
  });
  for (int64_t i = 0; i < rows; ++i) {  // the columns right of the last block, then the rows below
    for (int64_t j = i < full_rows ? full_cols : 0; j < cols; ++j) dst[j * rows + i] = src[i * stride + j];
  }
}

void check_float_matrix(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 2 && t.is_contiguous() && t.scalar_type() == at::kFloat,
              "sparse rows: ", what, " must be a contiguous 2-D float32 matrix on the CPU");
}

void check_sparse_rows(const at::Tensor& offsets, const at::Tensor& columns, const at::Tensor& values) {
  TORCH_CHECK(offsets.device().is_cpu() && offsets.dim() == 1 && offsets.is_contiguous() &&
                  offsets.scalar_type() == at::kLong && offsets.numel() >= 1,
              "sparse rows: offsets must be a contiguous 1-D int64 tensor of rows + 1 entries");
  TORCH_CHECK(columns.device().is_cpu() && columns.dim() == 1 && columns.is_contiguous() &&
                  columns.scalar_type() == at::kInt,
              "sparse rows: columns must be a contiguous 1-D int32 tensor");
  TORCH_CHECK(values.device().is_cpu() && values.dim() == 1 && values.is_contiguous() &&
                  values.scalar_type() == at::kFloat && values.numel() == columns.numel(),
              "sparse rows: values must be contiguous 1-D float32, one per column entry");
  TORCH_CHECK(offsets.data_ptr<int64_t>()[offsets.numel() - 1] == columns.numel(),
              "sparse rows: the last offset must be the number of entries");
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> sparse_rows(const at::Tensor& x, double max_share) {
  check_float_matrix(x, "x");
  const int64_t rows = x.size(0), in_dim = x.size(1);
  TORCH_CHECK(in_dim <= INT32_MAX, "sparse rows: at most 2^31 - 1 columns");
  const float* xs = x.data_ptr<float>();
  const auto [count_row, compress_row] = row_scan();
  // two passes over the rows, each parallel: count each row's non-zeros (a compare and a popcount per
  // sixteen values, far cheaper than the product it decides on), then, when they are few enough,
  // write each row's columns and values in place, their places known from the running sum
  at::Tensor offsets = at::empty({rows + 1}, x.options().dtype(at::kLong));
  int64_t* off = offsets.data_ptr<int64_t>();
  off[0] = 0;
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) off[i + 1] = count_row(xs + i * in_dim, in_dim);
  });
  for (int64_t i = 0; i < rows; ++i) off[i + 1] += off[i];
  if (static_cast<double>(off[rows]) > max_share * static_cast<double>(rows * in_dim)) {
    return {at::empty({0}, offsets.options()), at::empty({0}, x.options().dtype(at::kInt)),
            at::empty({0}, x.options())};  // too dense: no offsets say so
  }
  at::Tensor columns = at::empty({off[rows]}, x.options().dtype(at::kInt));
  at::Tensor values = at::empty({off[rows]}, x.options());
  int32_t* cols = columns.data_ptr<int32_t>();
  float* vals = values.data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) compress_row(xs + i * in_dim, in_dim, cols + off[i], vals + off[i]);
  });
  return {offsets, columns, values};
}

at::Tensor sparse_rows_linear(const at::Tensor& offsets, const at::Tensor& columns, const at::Tensor& values,
                              const at::Tensor& weight, const at::Tensor& bias) {
  check_sparse_rows(offsets, columns, values);
  check_float_matrix(weight, "weight");
  const int64_t rows = offsets.numel() - 1, out_dim = weight.size(0), in_dim = weight.size(1);
  TORCH_CHECK(bias.device().is_cpu() && bias.is_contiguous() && bias.scalar_type() == at::kFloat &&
                  bias.dim() == 1 && bias.numel() == out_dim,
              "sparse rows: bias must be contiguous float32 of weight.size(0) entries");
  const int32_t* cols = columns.data_ptr<int32_t>();
  TORCH_CHECK(columns.numel() == 0 || *std::max_element(cols, cols + columns.numel()) < in_dim,
              "sparse rows: a column is past weight's columns");
  at::Tensor out = at::empty({rows, out_dim}, weight.options());
  at::Tensor weight_t = at::empty({in_dim, out_dim}, weight.options());  // a column's weights in a row
  transpose_into(weight.data_ptr<float>(), in_dim, weight_t.data_ptr<float>(), out_dim, in_dim);
  const int64_t* off = offsets.data_ptr<int64_t>();
  const float* vals = values.data_ptr<float>();
  const float* wt = weight_t.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, rows, kRowsPerTask, [&](int64_t begin, int64_t end) {
#if defined(GRAPHTIER_X86_KERNELS)
    if (has_avx512() && product_rows_fixed(out_dim, off, cols, vals, wt, b, o, begin, end)) return;
#endif
    product_rows(off, cols, vals, wt, b, o, begin, end, out_dim);
  });
  return out;
}

at::Tensor sparse_rows_weight_grad(const at::Tensor& offsets, const at::Tensor& columns, const at::Tensor& values,
                                   const at::Tensor& grad_out, int64_t in_dim) {
  check_sparse_rows(offsets, columns, values);
  check_float_matrix(grad_out, "grad_out");
  const int64_t rows = offsets.numel() - 1, out_dim = grad_out.size(1);
  TORCH_CHECK(grad_out.size(0) == rows, "sparse rows: grad_out must have one row per compressed row");
  const int32_t* cols = columns.data_ptr<int32_t>();
  TORCH_CHECK(columns.numel() == 0 || *std::max_element(cols, cols + columns.numel()) < in_dim,
              "sparse rows: a column is past in_dim");
  at::Tensor grad_t = at::empty({in_dim, out_dim}, grad_out.options());
  const int64_t* off = offsets.data_ptr<int64_t>();
  const float* vals = values.data_ptr<float>();
  const float* g = grad_out.data_ptr<float>();
  float* gt = grad_t.data_ptr<float>();
  const int64_t tasks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), in_dim / 8));
  at::parallel_for(0, tasks, 1, [&](int64_t first, int64_t last) {
    for (int64_t task = first; task < last; ++task) {
      gradient_columns(off, cols, vals, g, gt, rows, in_dim * task / tasks, in_dim * (task + 1) / tasks, out_dim);
    }
  });
  at::Tensor grad_weight = at::empty({out_dim, in_dim}, grad_out.options());  // the weight's layout
  transpose_into(gt, out_dim, grad_weight.data_ptr<float>(), in_dim, out_dim);
  return grad_weight;
}

}  // namespace graphtier
