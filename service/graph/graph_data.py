"""`GraphData`: what every dataset source returns, before scoring and reordering.

Edges are directed `src -> dst` (a message flows from src to dst, as in PyG's default
`source_to_target` flow); a sampler that expands node v picks among v's in-neighbours.
Node ids are contiguous `0..num_nodes-1`; sources that read non-contiguous ids remap them
and keep the original ids in `original_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from graphtier.contract.errors import DatasetSourceError

SPLIT_NAMES = ("train", "val", "test")
UNLABELLED = -1  # label value of a node without a label


@dataclass
class GraphData:
    """A whole graph with optional node features, labels and a train/val/test split.

    Attributes:
        num_nodes: number of nodes; ids are `0..num_nodes-1`.
        src, dst: int64 edge endpoints, one entry per directed edge.
        features: float32 `[num_nodes, F]`, or None when the source has none.
        labels: int64 `[num_nodes]`, `UNLABELLED` (-1) where a node has no label, or None.
        splits: node ids per split name (`train`, `val`, `test`); may be empty.
        original_ids: int64 `[num_nodes]` ids as the source file spelled them, or None
            when they already were `0..num_nodes-1`.
        origin: where the data came from (a path or a generator spec), for messages.
        description: free-form facts about the source kept in the manifest.
        class_count: the number of classes once the labels were checked (`sources.label_classes`):
            a declared `--num-classes`, or the count of dense classes; None: the largest label + 1.
        class_labels: the source's label of each class when the labels were remapped, else None.
        notes: what a user should know about how the source was read (printed by `dataset prepare`).
    """

    num_nodes: int
    src: torch.Tensor
    dst: torch.Tensor
    features: torch.Tensor | None = None
    labels: torch.Tensor | None = None
    splits: dict[str, torch.Tensor] = field(default_factory=dict)
    original_ids: torch.Tensor | None = None
    origin: str = ""
    description: dict[str, object] = field(default_factory=dict)
    class_count: int | None = None
    class_labels: list[int] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    @property
    def num_classes(self) -> int:
        if self.labels is None or self.labels.numel() == 0:
            return 0
        if self.class_count is not None:
            return self.class_count
        return int(self.labels.max().item()) + 1

    def validate(self) -> GraphData:
        """Check shapes, dtypes and ranges; raise `DatasetSourceError` naming `origin`."""

        def fail(problem: str) -> None:
            raise DatasetSourceError(self.origin or None, problem)

        if self.num_nodes <= 0:
            fail("the graph is empty: it has no nodes")
        if self.src.dtype != torch.int64 or self.dst.dtype != torch.int64:
            fail(f"edge ids must be int64, got src {self.src.dtype} / dst {self.dst.dtype}")
        if self.src.dim() != 1 or self.src.shape != self.dst.shape:
            fail(f"src and dst must be 1-D of equal length, got {tuple(self.src.shape)} and {tuple(self.dst.shape)}")
        if self.src.numel() == 0:
            fail(
                f"the graph has {self.num_nodes} nodes but no edges: every node is isolated, so there are no "
                "neighbours to sample or aggregate (a model of the features alone needs no graphtier)"
            )
        lo = int(torch.minimum(self.src.min(), self.dst.min()))
        hi = int(torch.maximum(self.src.max(), self.dst.max()))
        if lo < 0 or hi >= self.num_nodes:
            fail(f"edge endpoint ids must lie in [0, {self.num_nodes}), found range [{lo}, {hi}]")
        if self.features is not None:
            f = self.features
            if f.dim() != 2 or f.shape[0] != self.num_nodes:
                fail(f"features have shape {tuple(f.shape)}, expected [{self.num_nodes}, F]")
            if f.dtype != torch.float32:
                fail(f"features must be float32, got {f.dtype}")
            bad = ~torch.isfinite(f)
            if bool(bad.any()):
                rows = bad.any(dim=1).nonzero().flatten()
                fail(
                    f"features contain {int(bad.sum())} NaN/inf values in {rows.numel()} rows "
                    f"(first row {int(rows[0])})"
                )
        if self.labels is not None:
            y = self.labels
            if y.dim() != 1 or y.shape[0] != self.num_nodes:
                fail(f"labels have shape {tuple(y.shape)}, expected [{self.num_nodes}]")
            if y.dtype != torch.int64:
                fail(f"labels must be int64, got {y.dtype}")
            if y.numel() and int(y.min()) < UNLABELLED:
                node = int((y < UNLABELLED).nonzero()[0])
                fail(
                    f"label {int(y[node])} (node {node}) is negative; "
                    f"labels must be >= 0 (or {UNLABELLED} for unlabelled)"
                )
        for name, ids in self.splits.items():
            if name not in SPLIT_NAMES:
                fail(f"unknown split {name!r}; expected one of {SPLIT_NAMES}")
            if ids.dtype != torch.int64 or ids.dim() != 1:
                fail(f"split {name!r} must be a 1-D int64 id tensor, got {ids.dtype} {tuple(ids.shape)}")
            if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
                fail(f"split {name!r} has ids outside [0, {self.num_nodes})")
            if ids.numel() != torch.unique(ids).numel():
                fail(f"split {name!r} contains duplicate ids")
        names = list(self.splits)
        for i, name in enumerate(names):  # a test id that is a train id would score the model on what it fit
            for other in names[i + 1 :]:
                shared = self.splits[name][torch.isin(self.splits[name], self.splits[other])]
                if shared.numel():
                    fail(f"splits {name!r} and {other!r} share {shared.numel()} node id(s), e.g. {int(shared[0])}")
        return self
