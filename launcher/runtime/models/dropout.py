"""`Dropout`: `torch.nn.Dropout`'s result, with its mask drawn by `torch.rand`.

Each element is kept with probability 1 - p and scaled by 1 / (1 - p), as `nn.Dropout` does.
On the CPU torch's own dropout draws every element through a Bernoulli sampler on one thread,
which made it a large share of a GraphSAGE step on a batch's input rows; a uniform draw compared
with p costs a fraction of that. The mask kept for the backward is bool, one byte an element, as
torch's is. On other devices (CUDA's fused kernel) it is `nn.Dropout` itself. Public as
`graphtier.nn.Dropout`, for scripts' own models.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Dropout(nn.Dropout):
    """`torch.nn.Dropout` with its CPU mask drawn by `torch.rand`, which is faster there.

    Same parameters and the same `eval()` behaviour as `torch.nn.Dropout`.

    Args:
        p: Probability of an element being zeroed.
        inplace: Whether to zero and scale the input in place.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__(p, inplace)

    def forward(self, x: Tensor) -> Tensor:
        """Zero each element of `x` with probability `p` and scale the rest by 1 / (1 - p) (training only).

        Args:
            x: The input.

        Returns:
            The result; `x` itself, changed, when `inplace`.
        """
        if not self.training or self.p in (0.0, 1.0) or x.device.type != "cpu" or not x.is_floating_point():
            return F.dropout(x, self.p, self.training, self.inplace)
        keep = torch.rand_like(x) >= self.p  # kept for the backward as bool, one byte an element as torch's
        scale = 1.0 / (1.0 - self.p)
        return x.mul_(keep).mul_(scale) if self.inplace else x.mul(keep).mul_(scale)
