"""`row_adam_step`: one lazy Adam step on some rows of a table, the update every row-wise optimizer shares.

A row's moments and step count advance only when a step touches it (the rows of an embedding table a
batch read), so a step costs the rows, not the table. With `weight_decay` the rows first shrink by
`lr x weight_decay` of themselves (decoupled, AdamW's form). Used by the featureless types' embedding
optimizer (`embedding_optimizer.py`) and a featureless link job's shared input rows (`link_model.py`).
A row given more than once (a batch that read it twice, or several ranks' rows gathered) gets the sum
of its gradients, and the finiteness of those sums can be checked before anything changes. On CPU
float32 tables, where the native ops are built, it is one call (`native/cpu/row_adam.cpp`); the torch
ops below are its fallback and reference.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphtier.service.native_ops import Backend, resolve_backend

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def row_adam_step(
    weight: Tensor,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    steps: Tensor,
    rows: Tensor,
    grad: Tensor,
    *,
    lr: float,
    weight_decay: float = 0.0,
    check_finite: bool = False,
    backend: Backend = "auto",
) -> int | None:
    """Update `weight[rows]` in place by `grad` ([len(rows), width]), with the moments `exp_avg`/`exp_avg_sq`
    and per-row `steps` of the same table. A row id given more than once gets the sum of its gradient rows.
    Returns the distinct rows updated; with `check_finite`, None when a (summed) gradient value is NaN or
    infinite, and then nothing changed."""
    beta1, beta2 = ADAM_BETAS
    native = (
        weight.device.type == "cpu"
        and weight.dtype == exp_avg.dtype == exp_avg_sq.dtype == grad.dtype == torch.float32
        and steps.dtype == torch.int64
        and all(t.is_contiguous() for t in (weight, exp_avg, exp_avg_sq, steps))
        and resolve_backend(backend, "row-wise Adam") == "native"
    )
    if native:
        updated = torch.ops.graphtier.row_adam_(
            weight, exp_avg, exp_avg_sq, steps, rows.to(torch.int64).contiguous(), grad.contiguous(),
            lr, beta1, beta2, ADAM_EPS, weight_decay, check_finite,
        )  # fmt: skip
        return None if updated < 0 else updated
    rows, inverse = torch.unique(rows, return_inverse=True)  # sorted: each gradient row goes to its id's place
    summed = torch.zeros(rows.numel(), grad.shape[1], dtype=grad.dtype, device=grad.device)
    grad = summed.index_add_(0, inverse, grad)  # a repeated row's gradients summed
    if check_finite and not bool(torch.isfinite(grad).all()):
        return None
    steps[rows] += 1
    step = steps[rows].to(grad.dtype).unsqueeze(1)
    m = exp_avg[rows].mul_(beta1).add_(grad, alpha=1 - beta1)
    v = exp_avg_sq[rows].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    exp_avg[rows], exp_avg_sq[rows] = m, v
    values = weight[rows]
    if weight_decay:
        values.mul_(1 - lr * weight_decay)
    values -= lr * (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + ADAM_EPS)
    weight[rows] = values
    return int(rows.numel())
