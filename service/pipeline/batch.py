"""`Batch`: one mini-batch as a trainer rank reads it, whoever sampled it.

The producer side writes a batch into a slot (`SlotViews`, slots.py); the rank side reads it
as a `Batch` (a `TypedBatch` for a typed dataset): out of a slot (`ChannelReader`, zero-copy views), sampled in-process
(`LocalBatchSource`, tensors of its own), or moved onto the rank's device (`to`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.sampling import Block, SampledSubgraph


def blocks_to(blocks: list[Block], device: torch.device) -> list[Block]:
    """The blocks with their index tensors on `device` (the same objects when already there)."""
    if all(b.indptr.device == device for b in blocks):
        return blocks
    return [
        Block(
            indptr=b.indptr.to(device, non_blocking=True),
            indices=b.indices.to(device, non_blocking=True),
            num_src=b.num_src,
            num_dst=b.num_dst,
        )
        for b in blocks
    ]


@dataclass
class Batch:
    """A sampled batch: blocks (input layer first), input features `x` [blocks[0].num_src, F]
    and the seeds' labels `y` [num_seeds] (-1 = unlabelled).

    Read out of a slot (`slot` is its index), every tensor is a read-only view of the slot
    (nothing was copied), valid until `release()` (explicit, at the end of a `with` block, or
    when the reader is asked for the next batch with auto-release on): after that the producer
    may overwrite the slot, so clone anything that must outlive the step; an in-place write
    into the mapping faults. A batch sampled in-process (`slot` None) owns its tensors.
    """

    subgraph: SampledSubgraph  # node_ids, indptr, indices and hop sizes
    features: torch.Tensor | None  # [num_nodes, *row_shape], rows of subgraph.node_ids; None: no features
    labels: torch.Tensor  # int64 [num_seeds]; -1 for unlabelled seeds
    traffic: TrafficCounts
    batch: int = 0  # running number over all epochs, from 0
    epoch: int = 0
    step: int = 0  # index within the epoch, from 0
    steps_per_epoch: int = 0
    sample_seed: int = 0
    slot: int | None = None  # the producer's slot it views; None: sampled in-process
    sample_s: float = 0.0
    gather_s: float = 0.0
    wait_s: float = 0.0  # how long the consumer waited for this batch
    blocks: list[Block] = field(default_factory=list)  # per layer, input layer first; from `subgraph` when empty
    pairs: torch.Tensor | None = None  # link prediction: int64 [P, 2] seed local ids, positives first; else None
    num_positive: int = 0  # link prediction: the first num_positive rows of `pairs` are edges, the rest negatives
    _release: Callable[[Batch], None] | None = field(default=None, repr=False)
    released: bool = False

    def __post_init__(self) -> None:
        if not self.blocks:
            self.blocks = self.subgraph.blocks()

    @property
    def x(self) -> torch.Tensor:
        """The input features; a batch of a dataset without features has none to train on."""
        if self.features is None:
            raise GraphtierError(f"batch {self.batch} carries no features; the dataset has none to train on")
        return self.features

    @property
    def y(self) -> torch.Tensor:
        return self.labels

    @property
    def node_ids(self) -> torch.Tensor:
        return self.subgraph.node_ids

    @property
    def num_seeds(self) -> int:
        return self.labels.numel()

    @property
    def seeds(self) -> torch.Tensor:
        """Global ids of the seeds (the first `num_seeds` node ids)."""
        return self.subgraph.node_ids[: self.num_seeds]

    @property
    def is_last_in_epoch(self) -> bool:
        return self.step == self.steps_per_epoch - 1

    @property
    def edge_index(self) -> torch.Tensor:
        """[2, E] int64 of every sampled edge: row 0 source, row 1 destination local ids (PyG convention)."""
        return self.blocks[0].edge_index()

    def to(self, device: torch.device) -> Batch:
        """This batch with its blocks, features and labels on `device` (itself when already there);
        releasing the copy releases this batch."""
        x = self.x if self.pairs is None else self.features  # a link batch may have none: learned embeddings
        if (
            (x is None or x.device == device)
            and self.labels.device == device
            and self.blocks[0].indptr.device == device
        ):
            return self
        return dataclasses.replace(
            self,
            blocks=blocks_to(self.blocks, device),
            features=x.to(device, non_blocking=True) if x is not None else None,
            labels=self.labels.to(device, non_blocking=True),
            pairs=self.pairs.to(device, non_blocking=True) if self.pairs is not None else None,
            _release=lambda _: self.release(),
        )

    def release(self) -> None:
        """Give the slot back to the producer (nothing to give back in-process); idempotent."""
        if not self.released:
            if self._release is None:
                self.released = True
            else:
                self._release(self)

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


@dataclass
class TypedBatch(Batch):
    """A typed (heterogeneous) batch: `subgraph` is a `TypedSampledSubgraph` (one id space, every
    sampled edge's relation, every node's type) and `features` maps each featured node type to its
    input rows [nodes of that type among the first block's sources, F_t], in their order there.

    Out of a slot every tensor is a read-only view, as for `Batch`. `relation_blocks(layer)` gives
    one block per relation; the built-in R-GCN and HGT take `(blocks, edge_types, *input_nodes,
    features)`. Featureless types have no entry: the model learns their rows.
    """

    features: dict[str, torch.Tensor]  # type: ignore[assignment]  # node type -> input rows of that type

    @property
    def x(self) -> torch.Tensor:
        raise GraphtierError(
            f"batch {self.batch} is typed: its input rows are per node type, in `x_dict` ({sorted(self.features)})"
        )

    @property
    def x_dict(self) -> dict[str, torch.Tensor]:
        """Node type -> input rows of that type (featured types only)."""
        return self.features

    @property
    def edge_types(self) -> list[torch.Tensor]:
        """Per layer (input first), the relation id of each of its block's edges."""
        return [self.subgraph.edge_types[: b.num_edges] for b in self.blocks]  # type: ignore[attr-defined]

    @property
    def node_types(self) -> torch.Tensor:
        """int64 [num_nodes]: the type index (schema order) of every local node."""
        return self.subgraph.node_types  # type: ignore[attr-defined]

    @property
    def input_nodes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(global ids, type indices) of the first block's sources."""
        n = self.blocks[0].num_src
        return self.subgraph.node_ids[:n], self.node_types[:n]

    def relation_blocks(self, layer: int) -> list[Block]:
        """One block per relation (relation-id order) of layer `layer`, over the layer's local ids."""
        return self.subgraph.relation_blocks(layer)  # type: ignore[attr-defined]

    def to(self, device: torch.device) -> TypedBatch:
        """This batch with its blocks, per-type rows and labels on `device`; releasing the copy releases this one."""
        if self.labels.device == device and self.blocks[0].indptr.device == device:
            return self
        sub = self.subgraph
        moved = dataclasses.replace(
            sub,
            node_ids=sub.node_ids.to(device),
            indptr=sub.indptr.to(device),
            indices=sub.indices.to(device),
            edge_types=sub.edge_types.to(device),  # type: ignore[attr-defined]
            node_types=sub.node_types.to(device),  # type: ignore[attr-defined]
        )
        return dataclasses.replace(
            self,
            subgraph=moved,
            blocks=moved.blocks(),
            features={name: rows.to(device, non_blocking=True) for name, rows in self.features.items()},
            labels=self.labels.to(device, non_blocking=True),
            _release=lambda _: self.release(),
        )
