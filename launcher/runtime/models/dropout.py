"""`Dropout`: `torch.nn.Dropout`'s result, with its CPU mask drawn faster.

Each element is kept with probability 1 - p and scaled by 1 / (1 - p), as `nn.Dropout` does.
On the CPU torch's own dropout draws every element through a Bernoulli sampler on one thread,
which made it a large share of a GraphSAGE step on a batch's input rows. Two cheaper draws, both
from torch's generator (so `torch.manual_seed` fixes them):

- `draw="uniform"` (the default): a `torch.rand` value per element compared with p; the mask kept
  for the backward is bool, one byte an element, as torch's is.
- `draw="bits"`: sixteen random bits per element from a counter-based stream (the sampler's
  splitmix64, `service/sampling/counter_rng.py`) keyed by one value drawn from torch's generator per
  call; of W = ceil(n / 4) 64-bit words, element i takes the (i // W)-th 16 bits of word i % W. p is
  rounded to a multiple of 1/65536 and the kept values scaled by the rounded keep rate, so the
  expectation is unchanged. Words depend only on (key, index): on CPU float32 rows where the native
  ops are built they, the mask and the product are one parallel pass (`native/cpu/dropout_bits.cpp`),
  elsewhere the torch ops below, with the same result. R-GAT uses it: torch's Mersenne Twister draws
  one element after another, which at ACM's mini-batches was a tenth of its step. A model's accuracy
  figures hold for the draw they were measured with, so the others keep the uniform one.

On other devices (CUDA's fused kernel) it is `nn.Dropout` itself. Public as `graphtier.nn.Dropout`,
for scripts' own models.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.service.native_ops import Backend, resolve_backend
from graphtier.service.sampling.counter_rng import stream

DropoutDraw = Literal["uniform", "bits"]
_LANES = 4  # 16-bit lanes per 64-bit word of the bits draw
_LEVELS = 1 << 16  # values of a lane


class _BitsDropout(torch.autograd.Function):
    """The bits draw's mask and product as one native op; the backward multiplies by each element's
    multiplier (the scale where kept, 0), one float an element: one product, no bool to float."""

    @staticmethod
    def forward(ctx, x: Tensor, seed: int, threshold: int, scale: float) -> Tensor:
        out, multiplier = torch.ops.graphtier.dropout_bits(x, seed, threshold, scale)
        ctx.save_for_backward(multiplier)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        (multiplier,) = ctx.saved_tensors
        return grad * multiplier, None, None, None


class Dropout(nn.Dropout):
    """`torch.nn.Dropout` with its CPU mask drawn faster; see the module docstring.

    Same parameters and the same `eval()` behaviour as `torch.nn.Dropout`.

    Args:
        p: Probability of an element being zeroed.
        inplace: Whether to zero and scale the input in place.
        draw: How the CPU mask is drawn: "uniform" (a `torch.rand` value an element) or "bits"
            (sixteen counter-based random bits an element, p rounded to a multiple of 1/65536).
    """

    backend: Backend = "auto"  # the bits draw's: the native op where built, or "torch"

    def __init__(self, p: float = 0.5, inplace: bool = False, draw: DropoutDraw = "uniform") -> None:
        super().__init__(p, inplace)
        if draw not in ("uniform", "bits"):
            raise ValueError(f"draw must be 'uniform' or 'bits', got {draw!r}")
        self.draw = draw

    def forward(self, x: Tensor) -> Tensor:
        """Zero each element of `x` with probability `p` and scale the rest by 1 / (1 - p) (training only).

        Args:
            x: The input.

        Returns:
            The result; `x` itself, changed, when `inplace`.
        """
        if not self.training or self.p in (0.0, 1.0) or x.device.type != "cpu" or not x.is_floating_point():
            return F.dropout(x, self.p, self.training, self.inplace)
        if self.draw == "bits":
            return self._bits(x)
        keep = torch.rand_like(x) >= self.p  # kept for the backward as bool, one byte an element as torch's
        scale = 1.0 / (1.0 - self.p)
        return x.mul_(keep).mul_(scale) if self.inplace else x.mul(keep).mul_(scale)

    def _bits(self, x: Tensor) -> Tensor:
        """The bits draw (module docstring)."""
        threshold = round(self.p * _LEVELS)
        scale = _LEVELS / (_LEVELS - threshold) if threshold < _LEVELS else 0.0
        seed = int(torch.randint(0, 1 << 62, (1,), dtype=torch.int64))  # the stream's key, from torch's generator
        native = x.dtype == torch.float32 and not self.inplace and resolve_backend(self.backend, "dropout") == "native"
        if native:
            return _BitsDropout.apply(x.contiguous(), seed, threshold, scale)
        words = stream(seed, (x.numel() + _LANES - 1) // _LANES)
        lanes = torch.cat([(words >> (16 * lane)) & (_LEVELS - 1) for lane in range(_LANES)])  # element i: i // W
        keep = (lanes[: x.numel()] >= threshold).view(x.shape)
        return x.mul_(keep).mul_(scale) if self.inplace else x.mul(keep).mul_(scale)
