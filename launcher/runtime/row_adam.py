"""`row_adam_step`: one lazy Adam step on some rows of a table, the update every row-wise optimizer shares.

A row's moments and step count advance only when a step touches it (the rows of an embedding table a
batch read), so a step costs the rows, not the table. With `weight_decay` the rows first shrink by
`lr x weight_decay` of themselves (decoupled, AdamW's form). Used by the featureless types' embedding
optimizer (`embedding_optimizer.py`) and a featureless link job's shared input rows (`link_model.py`).
"""

from __future__ import annotations

from torch import Tensor

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
) -> None:
    """Update `weight[rows]` in place by `grad` ([len(rows), width], one row per distinct id), with the
    moments `exp_avg`/`exp_avg_sq` and per-row `steps` of the same table."""
    beta1, beta2 = ADAM_BETAS
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
