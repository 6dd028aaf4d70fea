"""`SparseInputLinear`: `nn.Linear` over feature rows that are mostly zeros, computed over the non-zeros.

Bag-of-words features (ACM's papers: 1,902 columns, ~5% of a sampled batch's values non-zero) make a
heterogeneous model's input map the largest matrix product of its step, nearly all of it multiplying
zeros. On the CPU, where the native ops are built (`native/cpu/sparse_input_linear.cpp`), rows at most
`SPARSE_SHARE` non-zero are read once into compressed rows (their non-zeros' columns and values), and
the product and the weight's gradient multiply only those (the rows are data: they get no gradient).
Denser rows, other devices, inputs that need a gradient and builds without the ops take `nn.Linear`'s
product, which is also the reference the kernel is tested against. The parameters and their names are
`nn.Linear`'s, so checkpoints and exported weights are unchanged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.service.native_ops import Backend, resolve_backend

SPARSE_SHARE = 0.1  # at most this share of non-zeros: the kernel (at ACM's ~5%: about half the product's time)


class _SparseRowsLinear(torch.autograd.Function):
    """x @ weight^T + bias over x's compressed rows (`sparse_rows`); gradients for weight and bias, none for x."""

    @staticmethod
    def forward(ctx, offsets: Tensor, columns: Tensor, values: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        ctx.save_for_backward(offsets, columns, values)
        ctx.in_dim = weight.shape[1]
        return torch.ops.graphtier.sparse_rows_linear(offsets, columns, values, weight.contiguous(), bias)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        offsets, columns, values = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        grad_weight = None
        if ctx.needs_input_grad[3]:
            grad_weight = torch.ops.graphtier.sparse_rows_weight_grad(offsets, columns, values, grad_out, ctx.in_dim)
        grad_bias = grad_out.sum(0) if ctx.needs_input_grad[4] else None
        return None, None, None, grad_weight, grad_bias


class SparseInputLinear(nn.Linear):
    """`nn.Linear` for input features; see the module docstring. `backend`: "auto" (the kernel where it
    is built and the rows are sparse enough), "native" (the kernel whatever the share of non-zeros;
    fails when it is not built), "torch" (always the dense product)."""

    backend: Backend = "auto"

    def forward(self, x: Tensor) -> Tensor:
        rows = self._sparse_rows(x)
        if rows is not None:
            return _SparseRowsLinear.apply(*rows, self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)

    def _sparse_rows(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
        """`x`'s compressed rows when it goes through the kernel (float32 CPU rows needing no gradient,
        sparse enough); None when it takes the dense product."""
        if x.dim() != 2 or x.device.type != "cpu" or x.requires_grad or self.bias is None or x.numel() == 0:
            return None
        if not x.dtype == self.weight.dtype == self.bias.dtype == torch.float32:
            return None
        if resolve_backend(self.backend, "sparse input linear") != "native":
            return None
        share = 1.0 if self.backend == "native" else SPARSE_SHARE
        offsets, columns, values = torch.ops.graphtier.sparse_rows(x.contiguous(), share)
        return None if offsets.numel() == 0 else (offsets, columns, values)
