"""The input of a node type without features: a learned row per node, optionally over its neighbours' means.

- `SparseEmbedding`: the learned rows, starting at zero. Trained by the job's loop it runs in row mode
  (`enable_row_state`): its gradient is sparse (the rows a batch touched) and its own row-wise Adam
  (`launcher/runtime/embedding_optimizer.py`) keeps its state in the module, so a checkpoint holds it
  with the model and only the touched rows are read or written per step. Elsewhere (a script's own
  optimizer) it is a dense parameter, as `nn.Embedding` is.
- `NeighbourMeanInput` (`featureless_init = "neighbour-mean"`): for each relation joining the type to
  a featured type, the mean of the neighbours' features (computed once when the dataset is prepared,
  `NodeTypeInfo.neighbour_means`) through a learned linear map, summed over those relations. A node's
  input is that sum plus its learned embedding: the linear maps are shared by every node of the type,
  so the input starts informative and generalises to nodes no label reaches, and the per-node
  embedding is a residual from zero that only learns what the means lack. The means are buffers,
  exported with the weights, so a loaded model needs no dataset.

A type with no relation to a featured type has no means: it keeps the zero start (the job's notes name
it). `auto`, the jobs' default, is neighbour-mean wherever there are means (ACM's authors and subjects) and
zero elsewhere (Freebase, where nothing has features); an explicit neighbour-mean on a graph where no
featureless type has means is refused, naming its types, since it would change nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import get_args

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import FeaturelessInit, NodeTypeInfo
from graphtier.launcher.runtime.models.sparse_input import SparseInputLinear

ROW_STATE_BUFFERS = ("exp_avg", "exp_avg_sq", "steps")  # a SparseEmbedding's row-wise Adam state


@dataclass(frozen=True)
class FeaturelessOptions:
    """How featureless types enter a heterogeneous model: `init` and dropout on the learned rows."""

    init: FeaturelessInit = "zero"  # a model built directly (a script's own): nothing loads means into it
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.init not in get_args(FeaturelessInit):
            raise GraphtierError(f"featureless_init must be auto, zero or neighbour-mean, got {self.init!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise GraphtierError(f"embedding_dropout must be in [0, 1), got {self.dropout}")


class SparseEmbedding(nn.Module):
    """A learned `[count, width]` row per node, starting at zero; see the module docstring."""

    exp_avg: Tensor  # row mode only: the row-wise Adam state (ROW_STATE_BUFFERS)
    exp_avg_sq: Tensor
    steps: Tensor

    def __init__(self, count: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(count, width))  # starts neutral, learns from the labels it reaches
        self.row_mode = False

    def enable_row_state(self) -> None:
        """Sparse gradients and the row-wise Adam's state as buffers (checkpointed with the model)."""
        if self.row_mode:
            return
        self.register_buffer("exp_avg", torch.zeros_like(self.weight, requires_grad=False))
        self.register_buffer("exp_avg_sq", torch.zeros_like(self.weight, requires_grad=False))
        self.register_buffer("steps", torch.zeros(self.weight.shape[0], dtype=torch.int64, device=self.weight.device))
        self.row_mode = True

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight, sparse=self.row_mode)


class _RelationMean(nn.Module):
    """One relation's neighbour means (a buffer) and their linear map into the hidden width."""

    rows: Tensor

    def __init__(self, count: int, feature_dim: int, hidden: int) -> None:
        super().__init__()
        self.register_buffer("rows", torch.zeros(count, feature_dim))
        self.project = SparseInputLinear(feature_dim, hidden)  # means of bag-of-words rows are sparse too

    def forward(self, ids: Tensor) -> Tensor:
        return self.project(self.rows.index_select(0, ids))


class NeighbourMeanInput(nn.Module):
    """Sum over a type's relations to featured types of Linear_r(neighbour means over r); see the module docstring."""

    def __init__(self, info: NodeTypeInfo, hidden: int) -> None:
        super().__init__()
        self.arrays = [mean.array for mean in info.neighbour_means]
        self.relations = nn.ModuleList(_RelationMean(info.count, m.feature_dim, hidden) for m in info.neighbour_means)

    def load_means(self, arrays: Mapping[str, Tensor]) -> None:
        """Copy each relation's means from `arrays` (array name -> [count, feature_dim] rows)."""
        for name, relation in zip(self.arrays, self.relations, strict=True):
            assert isinstance(relation, _RelationMean)
            rows = arrays.get(name)
            if rows is None or tuple(rows.shape) != tuple(relation.rows.shape):
                got = None if rows is None else tuple(rows.shape)
                raise GraphtierError(f"neighbour means {name!r} must be {tuple(relation.rows.shape)}, got {got}")
            relation.rows.copy_(rows)

    def forward(self, ids: Tensor) -> Tensor:
        out = self.relations[0](ids)
        for relation in self.relations[1:]:
            out = out + relation(ids)
        return out


def rank_local_state(module: nn.Module) -> list[str]:
    """Names of what DDP must leave alone: row-mode embeddings (their own optimizer keeps the ranks'
    rows equal) with their state, and the neighbour means (equal on every rank, never changed)."""
    names: list[str] = []
    for prefix, child in module.named_modules():
        dot = f"{prefix}." if prefix else ""
        if isinstance(child, SparseEmbedding) and child.row_mode:
            names += [f"{dot}weight", *(f"{dot}{buffer}" for buffer in ROW_STATE_BUFFERS)]
        elif isinstance(child, _RelationMean):
            names.append(f"{dot}rows")
    return names


def row_state_names(module: nn.Module) -> list[str]:
    """Names of the row-wise Adam state in `module` (kept in checkpoints, left out of exported weights)."""
    names: list[str] = []
    for prefix, child in module.named_modules():
        if isinstance(child, SparseEmbedding) and child.row_mode:
            names += [f"{prefix}.{buffer}" if prefix else buffer for buffer in ROW_STATE_BUFFERS]
    return names
