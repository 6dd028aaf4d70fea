"""`HeteroGraphData`: a heterogeneous graph as a source reads it, in type-local ids, before preparation.

Node types have their own id spaces `0..count-1`; each relation holds its edges as
(head-local, tail-local) pairs. `to_global` lays the types out one after another in one id
space (see `graphtier.contract.hetero`) and builds the heterogeneous CSC the prepared form stores.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.contract.hetero import REVERSE_PREFIX, relation_key
from graphtier.service.graph.csc import CSCGraph


@dataclass
class Relation:
    """One relation's edges head -> tail, in type-local ids."""

    head: str
    name: str
    tail: str
    src: torch.Tensor  # int64 head-local ids
    dst: torch.Tensor  # int64 tail-local ids
    reverse_of: str | None = None

    @property
    def key(self) -> str:
        return relation_key(self.head, self.name, self.tail)


@dataclass
class HeteroCSC:
    """The heterogeneous graph in global ids: one CSC whose columns group their entries by relation id."""

    graph: CSCGraph
    edge_type: torch.Tensor  # int16 [E], relation id of each CSC entry (ascending within a column)


@dataclass
class HeteroGraphData:
    """A heterogeneous graph with features per type, labels and a split on one target type."""

    num_nodes: dict[str, int]  # per type, in global-layout order
    relations: list[Relation]
    target_type: str
    features: dict[str, torch.Tensor] = field(default_factory=dict)  # float32 [count, F_t] per featured type
    labels: torch.Tensor | None = None  # int64 [count of target type], -1 = unlabelled
    splits: dict[str, torch.Tensor] = field(default_factory=dict)  # target-local ids
    origin: str = ""
    description: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    class_count: int | None = None  # checked class count (`sources.label_classes`); None: largest label + 1
    class_labels: list[int] | None = None  # the source's label of each class when remapped

    @property
    def node_types(self) -> list[str]:
        return list(self.num_nodes)

    def offsets(self) -> dict[str, int]:
        out, running = {}, 0
        for name, count in self.num_nodes.items():
            out[name] = running
            running += count
        return out

    @property
    def total_nodes(self) -> int:
        return sum(self.num_nodes.values())

    @property
    def num_classes(self) -> int:
        if self.labels is None or self.labels.numel() == 0:
            return 0
        if self.class_count is not None:
            return self.class_count
        return int(self.labels.max()) + 1

    def add_reverse_relations(self) -> None:
        """Append `tail-rev_name-head` for every relation that is not itself a reverse."""
        for rel in list(self.relations):
            if rel.reverse_of is not None:
                continue
            reverse = Relation(rel.tail, REVERSE_PREFIX + rel.name, rel.head, rel.dst, rel.src, reverse_of=rel.key)
            if any(r.key == reverse.key for r in self.relations):
                raise DatasetSourceError(self.origin or None, f"relation {reverse.key} exists already; cannot add it")
            self.relations.append(reverse)

    def global_ids(self, node_type: str, local: torch.Tensor) -> torch.Tensor:
        return local + self.offsets()[node_type]

    def to_global(self) -> HeteroCSC:
        """The heterogeneous CSC over global ids, duplicate edges of a relation collapsed to one."""
        offsets, n = self.offsets(), self.total_nodes
        num_relations = len(self.relations)
        if n * n * num_relations >= 2**63:
            raise DatasetSourceError(
                self.origin or None, f"{n} nodes x {num_relations} relations overflow int64 edge keys"
            )
        keys = []
        for rid, rel in enumerate(self.relations):
            src = rel.src + offsets[rel.head]
            dst = rel.dst + offsets[rel.tail]
            keys.append((dst * num_relations + rid) * n + src)  # sorted by (dst, relation, src)
        key = torch.unique(torch.cat(keys), sorted=True)
        row = key % n
        column_rel = key // n
        dst = column_rel // num_relations
        edge_type = (column_rel - dst * num_relations).to(torch.int16)
        colptr = torch.zeros(n + 1, dtype=torch.int64)
        colptr[1:] = torch.cumsum(torch.bincount(dst, minlength=n), 0)
        return HeteroCSC(graph=CSCGraph(colptr=colptr, row=row), edge_type=edge_type)
