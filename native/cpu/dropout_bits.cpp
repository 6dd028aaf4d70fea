// Dropout of float32 rows from random bits (launcher/runtime/models/dropout.py has the contract and
// the torch reference it is tested against): with W words of `bits` (their low 48 bits drawn
// uniformly by torch's generator), element i reads 16-bit lane i / W of word i % W, and is kept when
// that lane is at least `threshold`; kept values are multiplied by `scale`. Returns the result and the
// multiplier of each element (`scale` where kept, 0), which the backward multiplies the gradient by. Lane by lane, each third of the elements is one plain loop over the words.
//
// torch.rand draws 32 bits per element from the generator, one element at a time, and the mask then
// takes a compare and two multiplies over the rows; at a mini-batch's few hundred rows of 128 values
// the draws and those passes were a tenth of a training step. Sixteen bits an element are a third of
// the draws, and the mask and the product are one pass here.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "graphtier/cpu_clones.h"
#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kElementsPerTask = 1 << 16;  // elements per parallel task, at least (a smaller call stays on one thread)

// Elements [begin, end): lane by lane, a plain loop without a branch (a kept element is a mask of
// random bits: a branch on it mispredicted half the time), which the compiler vectorises.
GRAPHTIER_CPU_CLONES
void keep_lanes(const int64_t* __restrict__ word, const float* __restrict__ in, float* __restrict__ out,
                float* __restrict__ multiplier, int64_t words, int64_t begin, int64_t end, uint32_t bar,
                float factor) {
  for (int64_t lane = 0; lane < 3; ++lane) {
    const int64_t first = std::max(begin, lane * words), last = std::min(end, (lane + 1) * words);
    const int64_t* lane_word = word - lane * words;
    const int shift = static_cast<int>(16 * lane);
    for (int64_t i = first; i < last; ++i) {
      const uint32_t kept = (static_cast<uint64_t>(lane_word[i]) >> shift & 0xFFFFu) >= bar;
      multiplier[i] = factor * static_cast<float>(kept);
      out[i] = in[i] * multiplier[i];
    }
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> dropout_bits(const at::Tensor& x, const at::Tensor& bits, int64_t threshold,
                                                double scale) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "dropout_bits: x must be contiguous float32 on the CPU");
  const int64_t n = x.numel(), words = (n + 2) / 3;
  TORCH_CHECK(bits.device().is_cpu() && bits.is_contiguous() && bits.scalar_type() == at::kLong &&
                  bits.dim() == 1 && bits.numel() == words,
              "dropout_bits: bits must be contiguous int64, one word per three elements");
  TORCH_CHECK(threshold >= 0 && threshold <= 65536, "dropout_bits: threshold must be in [0, 65536]");
  at::Tensor out = at::empty_like(x);
  at::Tensor multiplier = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  const int64_t* word = bits.data_ptr<int64_t>();
  float* o = out.data_ptr<float>();
  float* k = multiplier.data_ptr<float>();
  const auto factor = static_cast<float>(scale);
  const auto bar = static_cast<uint32_t>(threshold);
  at::parallel_for(0, n, kElementsPerTask, [&](int64_t begin, int64_t end) {
    keep_lanes(word, in, o, k, words, begin, end, bar, factor);
  });
  return {out, multiplier};
}

}  // namespace graphtier
