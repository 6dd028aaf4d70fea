"""`Batch`: one mini-batch as a trainer rank reads it, whoever sampled it.

The producer side writes a batch into a slot (`SlotViews`, slots.py); the rank side reads it
as a `Batch`, whatever the graph: out of a slot (`ChannelReader`, zero-copy views), sampled in-process
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
    """A sampled batch, of a graph with one node type or a heterogeneous one: `blocks` (input layer
    first), the input rows `x` and the seeds' labels `y` [num_seeds] (-1 = unlabelled).

    `x` holds the rows of the first block's sources: one tensor [blocks[0].num_src, F] for a graph
    with one node type; for a heterogeneous graph (`is_hetero`) a dict from each featured node type to
    its rows [that type's nodes among those sources, F_t], in their order there (featureless types
    have no entry: a model learns their rows); None when the dataset has no features at all.
    A heterogeneous batch also gives each edge's relation (`edge_types`), each node's type
    (`node_types`) and one block per relation (`relation_blocks`). A link-prediction batch carries
    the pairs to score over its seeds (`pairs`, the first `num_positive` of them edges).

    Read out of a slot (`slot` is its index), every tensor is a read-only view of the slot
    (nothing was copied), valid until `release()` (explicit, at the end of a `with` block, or
    when the reader is asked for the next batch with auto-release on): after that the producer
    may overwrite the slot, so clone anything that must outlive the step; an in-place write
    into the mapping faults. A batch sampled in-process (`slot` None) owns its tensors.

    Attributes:
        subgraph: The sample: global ids of its nodes (seeds first, then each hop's new nodes), its
            edges over local ids, the sizes of each hop; a heterogeneous graph's relations and
            node types; a link-prediction batch's pairs.
        x: The input rows (above); None when the dataset has no features.
        y: int64 [num_seeds], the seeds' labels; -1 for unlabelled seeds.
        traffic: Rows and bytes the gather of its input rows read from each tier.
        batch: Running number over all epochs, from 0.
        epoch: The epoch it belongs to, from 0.
        step: Its index within the epoch, from 0.
        steps_per_epoch: Batches in its epoch.
        sample_seed: The seed its sample was drawn with.
        slot: The producer's slot it views; None: sampled in-process.
        sample_s: Seconds the producer spent sampling it.
        gather_s: Seconds the producer spent gathering its rows.
        wait_s: Seconds the reader waited for it.
        blocks: One `Block` per layer, input layer first.
        released: Whether the batch was handed back.
    """

    subgraph: SampledSubgraph
    x: torch.Tensor | dict[str, torch.Tensor] | None
    y: torch.Tensor
    traffic: TrafficCounts
    batch: int = 0
    epoch: int = 0
    step: int = 0
    steps_per_epoch: int = 0
    sample_seed: int = 0
    slot: int | None = None
    sample_s: float = 0.0
    gather_s: float = 0.0
    wait_s: float = 0.0
    blocks: list[Block] = field(default_factory=list)  # from `subgraph` when empty
    _release: Callable[[Batch], None] | None = field(default=None, repr=False)
    released: bool = False

    def __post_init__(self) -> None:
        if not self.blocks:
            self.blocks = self.subgraph.blocks()

    @property
    def is_hetero(self) -> bool:
        """Whether the batch is of a heterogeneous graph (per-type `x`, relations, node types)."""
        return self.subgraph.is_hetero

    @property
    def node_ids(self) -> torch.Tensor:
        """Global ids of the sampled nodes, in local-id order: seeds first, then each hop's new nodes."""
        return self.subgraph.node_ids

    @property
    def num_seeds(self) -> int:
        """Seed nodes in the batch: the first rows of a model's output are theirs."""
        return self.y.numel()

    @property
    def seeds(self) -> torch.Tensor:
        """Global ids of the seeds (the first `num_seeds` node ids)."""
        return self.subgraph.node_ids[: self.num_seeds]

    @property
    def pairs(self) -> torch.Tensor | None:
        """Link prediction: int64 [P, 2] seeds' local ids of the pairs to score, positives first; else None."""
        return self.subgraph.pairs

    @property
    def num_positive(self) -> int:
        """Link prediction: the first `num_positive` rows of `pairs` are edges, the rest negatives."""
        return self.subgraph.num_positive

    @property
    def is_last_in_epoch(self) -> bool:
        """Whether it is its epoch's last batch."""
        return self.step == self.steps_per_epoch - 1

    @property
    def edge_index(self) -> torch.Tensor:
        """[2, E] int64 of every sampled edge: row 0 source, row 1 destination local ids (PyG convention)."""
        return self.blocks[0].edge_index()

    def _hetero_part(self, name: str) -> torch.Tensor:
        part = getattr(self.subgraph, name)
        if part is None:
            raise GraphtierError(f"batch {self.batch} is of a graph with one node type: it has no {name}")
        return part

    @property
    def edge_types(self) -> list[torch.Tensor]:
        """Heterogeneous: per layer (input first), the relation id of each of its block's edges."""
        relations = self._hetero_part("edge_types")
        return [relations[: b.num_edges] for b in self.blocks]

    @property
    def node_types(self) -> torch.Tensor:
        """Heterogeneous: int64 [num_nodes], the type index (schema order) of every local node."""
        return self._hetero_part("node_types")

    @property
    def input_nodes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Heterogeneous: (global ids, type indices) of the first block's sources."""
        n = self.blocks[0].num_src
        return self.subgraph.node_ids[:n], self.node_types[:n]

    def relation_blocks(self, layer: int) -> list[Block]:
        """Heterogeneous: one block per relation of a layer, over the layer's local ids.

        Args:
            layer: The GNN layer, 0 = the input layer.

        Returns:
            The layer's blocks in relation-id order (the schema's).

        Raises:
            GraphtierError: The batch is of a graph with one node type.
        """
        self._hetero_part("edge_types")
        return self.subgraph.relation_blocks(layer)

    def to(self, device: torch.device) -> Batch:
        """This batch with its sample, input rows and labels on `device`.

        Args:
            device: Where the tensors go.

        Returns:
            The batch itself when it is already there; else a copy, whose release releases this batch.
        """
        if self.y.device == device and self.blocks[0].indptr.device == device and _rows_on(self.x, device):
            return self
        subgraph = self.subgraph.to(device)
        x = self.x
        if isinstance(x, dict):
            x = {name: rows.to(device, non_blocking=True) for name, rows in x.items()}
        elif x is not None:
            x = x.to(device, non_blocking=True)
        return dataclasses.replace(
            self,
            subgraph=subgraph,
            blocks=subgraph.blocks() if subgraph is not self.subgraph else blocks_to(self.blocks, device),
            x=x,
            y=self.y.to(device, non_blocking=True),
            _release=lambda _: self.release(),
        )

    def on_device(self, device: torch.device) -> Batch:
        """This batch ready to train on `device`. A batch read out of a producer's slot is used where it
        lies, never copied: its slot is on the rank's device (a device slot for a cuda job, a host slot
        for a cpu job), and a batch elsewhere means the job's producer and rank disagree, which is an
        error, not a silent copy per step. A batch sampled in-process is moved (`to`)."""
        if self.slot is None:
            return self.to(device)
        where = self.y.device  # every region of a slot is on its device; labels always exist
        if where.type != device.type or (device.index is not None and where.index != device.index):
            raise GraphtierError(
                f"batch {self.batch} lies in a slot on {where} but this rank trains on {device}: the producer must "
                "fill slots on the rank's device (a --device cuda job gets device slots on cuda:LOCAL_RANK)"
            )
        return self

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


def _rows_on(x: torch.Tensor | dict[str, torch.Tensor] | None, device: torch.device) -> bool:
    if x is None:
        return True
    rows = x.values() if isinstance(x, dict) else (x,)
    return all(r.device == device for r in rows)
