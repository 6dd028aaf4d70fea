"""`EmbeddingOptimizer`: the featureless types' learned embeddings trained by their own row-wise Adam.

The training loop puts every `SparseEmbedding` of its model in row mode: its gradient is sparse,
the rows the batch touched, and the dense Adam and DDP leave it out. After each step every rank
all-gathers the touched rows' gradients (ids and rows), sums them per row and divides by the
ranks (what DDP's averaging gives a dense parameter), and applies the same update to the same
rows, so every rank's table stays equal without ever sending it whole. Only those rows are read
and written: a step's cost follows the batch, not the table (large on big graphs).

The update is Adam with decoupled weight decay (AdamW) on the touched rows, lazily: a row's
moments and step count advance only when a batch touches it, and it decays only then, by
`lr x weight_decay` of itself before its Adam step. Decoupled rather than L2: Adam divides an L2
term by the row's gradient scale, so a rarely-touched row with small gradients would be pulled to
zero hard and a busy one hardly at all; decoupled decay shrinks every row by the same share each
time it is used, a prior towards the zero start that does not depend on how loud its gradients are.
`torch.optim.SparseAdam` has no weight decay, hence this.

The state (`exp_avg`, `exp_avg_sq`, per-row `steps`) are buffers of the embedding module, so the
model's checkpoint carries it and a restart resumes it; an exported model leaves it out.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.distributed import all_gather_rows
from graphtier.launcher.runtime.models.featureless import SparseEmbedding
from graphtier.launcher.runtime.models.rgcn import EMBEDDING_LR_SCALE
from graphtier.launcher.runtime.nonfinite import NonFiniteError, OnNonFinite
from graphtier.launcher.runtime.row_adam import row_adam_step
from graphtier.launcher.runtime.train_config import TrainConfig


def embedding_settings(config: TrainConfig) -> dict[str, Any]:
    """`EmbeddingOptimizer.for_model`'s settings from a job's loop configuration."""
    return {
        "lr": config.embedding_lr or config.lr * EMBEDDING_LR_SCALE,
        "weight_decay": config.embedding_weight_decay,
        "on_nonfinite": config.on_nonfinite,
    }


class EmbeddingOptimizer:
    """Row-wise AdamW over a model's `SparseEmbedding`s; see the module docstring. Every rank calls
    `step` once per training step (it all-gathers), after the dense optimizer's."""

    def __init__(
        self,
        tables: list[tuple[str, SparseEmbedding]],
        *,
        lr: float,
        weight_decay: float = 0.0,
        on_nonfinite: OnNonFinite = "fail",
    ) -> None:
        if not lr > 0:
            raise GraphtierError(f"embedding_lr must be > 0, got {lr}")
        if not 0.0 <= weight_decay <= 1.0:
            raise GraphtierError(f"embedding_weight_decay must be in [0, 1], got {weight_decay}")
        self.tables, self.lr, self.weight_decay, self.on_nonfinite = tables, lr, weight_decay, on_nonfinite
        for _, table in tables:
            table.enable_row_state()

    @classmethod
    def for_model(
        cls, module: nn.Module, *, lr: float, weight_decay: float = 0.0, on_nonfinite: OnNonFinite = "fail"
    ) -> EmbeddingOptimizer | None:
        """The optimizer of `module`'s embeddings, put in row mode; None when it has none."""
        tables = [(name, m) for name, m in module.named_modules() if isinstance(m, SparseEmbedding)]
        if not tables:
            return None
        return cls(tables, lr=lr, weight_decay=weight_decay, on_nonfinite=on_nonfinite)

    def zero_grad(self) -> None:
        for _, table in self.tables:
            table.weight.grad = None

    @torch.no_grad()
    def step(self, *, skip: bool = False) -> int:
        """Gather every rank's touched rows and update them (not when `skip`: the dense step was
        skipped); returns the rows updated. A non-finite gathered gradient follows `on_nonfinite`."""
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        updated = 0
        for name, table in self.tables:
            ids, grad = _touched_rows(table)
            ids, grad = all_gather_rows(ids, grad)
            if skip or ids.numel() == 0:
                continue
            if world > 1:  # the ranks' gradients of a row are summed below, DDP's average
                grad = grad / world
            rows = row_adam_step(
                table.weight.data, table.exp_avg, table.exp_avg_sq, table.steps, ids, grad,
                lr=self.lr, weight_decay=self.weight_decay, check_finite=self.on_nonfinite != "off",
            )  # fmt: skip
            if rows is None:
                if self.on_nonfinite == "fail":
                    raise NonFiniteError(f"the gradient of {name}.weight is not finite (on_nonfinite: fail)")
                continue  # skip-step: these rows keep their values, equal on every rank
            updated += rows
        return updated


def _touched_rows(table: SparseEmbedding) -> tuple[Tensor, Tensor]:
    """(row ids, gradient rows) of this rank's step, an id possibly more than once (`row_adam_step` sums
    them); none when it has no gradient."""
    grad = table.weight.grad
    width = table.weight.shape[1]
    if grad is None:
        device = table.weight.device
        return torch.empty(0, dtype=torch.int64, device=device), torch.empty(0, width, device=device)
    if grad.is_sparse:  # as the embedding's backward made it, uncoalesced: the sort is the step's
        return grad._indices()[0], grad._values().reshape(-1, width)
    touched = grad.abs().sum(1).nonzero().squeeze(1)  # a dense gradient (not in row mode): its non-zero rows
    return touched, grad.index_select(0, touched)
