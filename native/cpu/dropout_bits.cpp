// Dropout of float32 rows from counter-based random bits (launcher/runtime/models/dropout.py has the
// contract and the torch twin it is tested against): with W = ceil(n / 4) words, word w is
// draw(splitmix64(key), w) of graphtier/counter_rng.h (the sampler's counter-based randomness; `key`
// is one value drawn from torch's generator per call), element i reads 16-bit lane i / W of word
// i % W, and is kept when that lane is at least `threshold`; kept values are multiplied by `scale`.
// Returns the result and the multiplier of each element (`scale` where kept, 0), which the backward
// multiplies the gradient by.
//
// torch.rand draws 32 bits per element from torch's Mersenne Twister, one element after another,
// and the mask then takes a compare and two multiplies over the rows: at ACM's mini-batches that was
// a tenth of an R-GAT step, and at 1,024 seeds (720,000 values a layer) milliseconds. A word's bits
// depend only on (key, w), so the words are computed in parallel and vectorised, and the mask and
// the product are one branch-free pass.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "graphtier/counter_rng.h"
#include "graphtier/cpu_clones.h"
#include "graphtier/ops.h"

namespace graphtier {
namespace {

constexpr int64_t kLanes = 4;               // 16-bit lanes of a 64-bit word
constexpr int64_t kWordsPerTask = 1 << 14;  // words per parallel task, at least (a smaller call stays on one thread)
constexpr int64_t kBlockWords = 256;        // words computed together, then read lane by lane

// Words [begin, end): each word's four lanes decide four elements, one in each quarter of the rows.
// Block by block of words: the block's words computed once (one loop), then each quarter's elements
// (one loop a lane); both loops vectorise, and neither branches on a kept element (a mask of random
// bits: a branch mispredicted half the time).
GRAPHTIER_CPU_CLONES
void keep_words(uint64_t key, const float* __restrict__ in, float* __restrict__ out, float* __restrict__ multiplier,
                int64_t n, int64_t words, int64_t begin, int64_t end, uint32_t bar, float factor) {
  uint64_t block[kBlockWords];
  for (int64_t first = begin; first < end; first += kBlockWords) {
    const int64_t count = std::min(kBlockWords, end - first);
    for (int64_t w = 0; w < count; ++w) block[w] = draw(key, static_cast<uint64_t>(first + w));
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const int64_t at = lane * words + first;  // the quarter's element of the block's first word
      const int64_t valid = std::min(count, n - at);  // the last quarter may be short
      const int shift = static_cast<int>(16 * lane);
      for (int64_t w = 0; w < valid; ++w) {
        const float kept = static_cast<float>((block[w] >> shift & 0xFFFFu) >= bar);
        multiplier[at + w] = factor * kept;
        out[at + w] = in[at + w] * multiplier[at + w];
      }
    }
  }
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> dropout_bits(const at::Tensor& x, int64_t seed, int64_t threshold, double scale) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == at::kFloat,
              "dropout_bits: x must be contiguous float32 on the CPU");
  TORCH_CHECK(threshold >= 0 && threshold <= 65536, "dropout_bits: threshold must be in [0, 65536]");
  const int64_t n = x.numel(), words = (n + kLanes - 1) / kLanes;
  at::Tensor out = at::empty_like(x);
  at::Tensor multiplier = at::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  float* k = multiplier.data_ptr<float>();
  const uint64_t key = splitmix64(static_cast<uint64_t>(seed));
  const auto factor = static_cast<float>(scale);
  const auto bar = static_cast<uint32_t>(threshold);
  at::parallel_for(0, words, kWordsPerTask, [&](int64_t begin, int64_t end) {
    keep_words(key, in, o, k, n, words, begin, end, bar, factor);
  });
  return {out, multiplier};
}

}  // namespace graphtier
