"""`SparseInputLinear`: `nn.Linear` over feature rows that are mostly zeros, computed over the non-zeros.

Bag-of-words features (ACM's papers: 1,902 columns, ~5% of a sampled batch's values non-zero) make a
heterogeneous model's input map the largest matrix product of its step, nearly all of it multiplying
zeros. On the CPU, where the native ops are built (`native/cpu/sparse_input_linear.cpp`), rows whose
first `PROBE_ROWS` are at most `SPARSE_SHARE` non-zero go through a kernel that scans each row once and
multiplies only its non-zeros, forward and for the weight's gradient (the rows are data: they get no
gradient). Denser rows, other devices, inputs that need a gradient and builds without the ops take
`nn.Linear`'s product, which is also the reference the kernel is tested against. The parameters and
their names are `nn.Linear`'s, so checkpoints and exported weights are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.service.native_ops import Backend, resolve_backend

SPARSE_SHARE = 0.1  # at most this share of non-zeros: the kernel (at ACM's ~5%: about half the product's time)
PROBE_ROWS = 64  # the rows whose non-zeros decide (a count over every row cost a tenth of the kernel)


class _SparseInputLinear(torch.autograd.Function):
    """x @ weight^T + bias through the native kernel; gradients for weight and bias, none for x."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.ops.graphtier.sparse_input_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        (x,) = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = torch.ops.graphtier.sparse_input_linear_weight_grad(grad_out, x)
        grad_bias = grad_out.sum(0) if ctx.needs_input_grad[2] else None
        return None, grad_weight, grad_bias


class SparseInputLinear(nn.Linear):
    """`nn.Linear` for input features; see the module docstring. `backend`: "auto" (the kernel where it
    is built and the rows are sparse enough), "native" (the kernel whatever the share of non-zeros;
    fails when it is not built), "torch" (always the dense product)."""

    backend: Backend = "auto"

    def forward(self, x: Tensor) -> Tensor:
        if self._sparse(x):
            return _SparseInputLinear.apply(x.contiguous(), self.weight.contiguous(), self.bias)
        return F.linear(x, self.weight, self.bias)

    def _sparse(self, x: Tensor) -> bool:
        """Whether `x` goes through the kernel: float32 CPU rows needing no gradient, sparse enough."""
        if x.dim() != 2 or x.device.type != "cpu" or x.requires_grad or self.bias is None or x.numel() == 0:
            return False
        if not x.dtype == self.weight.dtype == self.bias.dtype == torch.float32:
            return False
        if resolve_backend(self.backend, "sparse input linear") != "native":
            return False
        probe = x[:PROBE_ROWS]
        return self.backend == "native" or int(torch.count_nonzero(probe)) <= SPARSE_SHARE * probe.numel()
