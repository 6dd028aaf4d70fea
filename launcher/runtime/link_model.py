"""Link prediction's model: a GNN encoder, a pair decoder and, for featureless graphs, learned node embeddings.

`LinkModel(blocks, x, pairs)` embeds a batch's seeds (every endpoint of its pairs) with one of
the built-in GNNs, its input rows scaled to unit length first (as PyG's link example normalises
Cora's features: unscaled bag-of-words rows make the first dot products so large that the
sigmoid saturates and nothing is learned), and scores each pair: `dot` (the dot product of the two embeddings), `mlp`
(an MLP over their element-wise product, as OGB's link examples), `mlp+cn` (that MLP fed also the
pair's common-neighbour features, `PairStructure`: the overlap of the two neighbourhoods that two
independent embeddings cannot express, and on which Adamic-Adar beats plain GNNs) or `mlp+cn+aa`
(mlp+cn, and at evaluation that score plus the pair's Adamic-Adar weighted by the weight with the
best validation Hits@K, so the model ranks at least about as well as the heuristic). A graph without features
trains `NodeEmbeddings` instead, as WholeGraph's distributed embeddings do: the rows of a
batch's nodes are gathered as its input, their gradients scattered back to those rows only,
and a row-wise (lazy) Adam updates just the rows a batch touched. The table is one
shared-memory segment per machine; every rank's row gradients are all-gathered and each
machine's local ranks update disjoint shares of the touched rows in it, so the machines'
copies stay identical without broadcasting the table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.link import PAIR_FEATURE_DECODERS, DecoderKind
from graphtier.launcher.runtime.distributed import all_gather_rows
from graphtier.launcher.runtime.models import build_model
from graphtier.launcher.runtime.models.factory import ModelName
from graphtier.launcher.runtime.row_adam import row_adam_step
from graphtier.service.graph.common_neighbours import PAIR_FEATURE_NAMES
from graphtier.service.sampling import Block
from graphtier.service.shm import SegmentOwner
from graphtier.service.shm.ref import map_segment, view_of_mapping


class DotDecoder(nn.Module):
    """score(u, v) = <h_u, h_v>."""

    def forward(self, left: Tensor, right: Tensor, pair_features: Tensor | None = None) -> Tensor:
        return (left * right).sum(dim=-1)


class MLPDecoder(nn.Module):
    """score(u, v) = MLP(h_u * h_v): two layers, ReLU between."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, left: Tensor, right: Tensor, pair_features: Tensor | None = None) -> Tensor:
        return self.layers(left * right).squeeze(-1)


class StructuralMLPDecoder(nn.Module):
    """score(u, v) = MLP([h_u * h_v, S(u, v)]), S an MLP embedding of the pair's common-neighbour
    features (CN, Adamic-Adar, resource allocation; `PairStructure.features`).

    `embedding_only` is an MLP over h_u * h_v alone, trained beside it as an auxiliary loss and
    never used to score: without it the encoder learns little once the common neighbours
    separate most training pairs, and pairs without any (most of a sparse graph's) rank badly.
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.structure = nn.Sequential(
            nn.Linear(len(PAIR_FEATURE_NAMES), width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        self.layers = nn.Sequential(nn.Linear(2 * width, width), nn.ReLU(), nn.Linear(width, 1))
        self.embedding_only = MLPDecoder(width)

    def forward(self, left: Tensor, right: Tensor, pair_features: Tensor | None = None) -> Tensor:
        if pair_features is None:
            raise ValueError("the mlp+cn decoder scores a pair from its common-neighbour features: none were given")
        structure = self.structure(pair_features.to(left.device, left.dtype))
        return self.layers(torch.cat([left * right, structure], dim=-1)).squeeze(-1)


# the Adamic-Adar weights `ResidualAdamicAdarDecoder` is calibrated over at evaluation: none, then 1/8 to 4096
# doubling, the top large enough that Adamic-Adar orders the pairs and the learned score only breaks its ties
CALIBRATION_WEIGHTS = (0.0, *(2.0**power for power in range(-3, 13)))


class ResidualAdamicAdarDecoder(StructuralMLPDecoder):
    """At evaluation, score(u, v) = mlp+cn's score + w * log1p(Adamic-Adar(u, v)), w >= 0 calibrated.

    Training is mlp+cn's (BCE on one negative per edge, the embedding-only head beside it): w is
    not trained, as a loss over so few negatives says nothing about ranking a positive above all
    but K of many random pairs. Evaluation (`link_eval.calibrate`) sets `calibrated_weight` to a
    weight of `CALIBRATION_WEIGHTS` by validation Hits@K: from 0 (the learned score alone) to
    weights at which the heuristic orders pairs and the learned score only breaks its ties, where
    Hits@K is at least about the heuristic's own; `calibration` keeps what was measured.
    """

    calibrated_weight: Tensor  # a buffer: w, saved with the model

    def __init__(self, width: int) -> None:
        super().__init__(width)
        self.register_buffer("calibrated_weight", torch.tensor(0.0))
        self.calibration: dict[str, float] = {}  # the latest calibration's figures (see link_eval.calibrate)

    def forward(self, left: Tensor, right: Tensor, pair_features: Tensor | None = None) -> Tensor:
        learned = super().forward(left, right, pair_features)
        if self.training:
            return learned
        assert pair_features is not None  # the super call refuses None
        return learned + self.calibrated_weight * self.adamic_adar(pair_features).to(learned.device, learned.dtype)

    @staticmethod
    def adamic_adar(pair_features: Tensor) -> Tensor:
        """log1p(Adamic-Adar) of each pair, from `PairStructure.features`."""
        return pair_features[:, PAIR_FEATURE_NAMES.index("adamic_adar")]


def build_decoder(kind: DecoderKind, width: int) -> nn.Module:
    if kind == "mlp+cn+aa":
        return ResidualAdamicAdarDecoder(width)
    if kind == "mlp+cn":
        return StructuralMLPDecoder(width)
    return MLPDecoder(width) if kind == "mlp" else DotDecoder()


class LinkModel(nn.Module):
    """The encoder (a built-in GNN, output `hidden` wide) and the decoder; `forward` scores pairs."""

    def __init__(
        self,
        model: ModelName,
        in_dim: int,
        hidden: int,
        layers: int,
        *,
        decoder: DecoderKind = "dot",
        dropout: float = 0.5,
        heads: int = 4,
    ) -> None:
        super().__init__()
        self.hidden = hidden
        self.reads_pair_features = decoder in PAIR_FEATURE_DECODERS
        self.encoder = build_model(model, in_dim, hidden, hidden, layers, dropout, heads)
        self.decoder = build_decoder(decoder, hidden)

    def forward(
        self,
        blocks: list[Block],
        x: Tensor,
        pairs: Tensor,
        pair_features: Tensor | None = None,
        *,
        auxiliary: bool = False,
    ) -> Tensor:
        """[P] logits of `pairs` (seed local ids) from the batch's blocks and input rows (and, for a
        decoder that `reads_pair_features`, the pairs' `PairStructure.features`). `auxiliary`, for
        the mlp+cn and mlp+cn+aa decoders: [2, P], the logits and the embedding-only head's, both to train."""
        h = self.embed(blocks, x)
        logits = self.score(h, pairs, pair_features)
        if not auxiliary:
            return logits
        if not isinstance(self.decoder, StructuralMLPDecoder):
            raise ValueError("only the mlp+cn and mlp+cn+aa decoders have an auxiliary head")
        head = self.decoder.embedding_only
        return torch.stack([logits, head(h.index_select(0, pairs[:, 0]), h.index_select(0, pairs[:, 1]))])

    def score(self, h: Tensor, pairs: Tensor, pair_features: Tensor | None = None) -> Tensor:
        """[P] logits of `pairs`, rows of the embeddings `h`."""
        return self.decoder(h.index_select(0, pairs[:, 0]), h.index_select(0, pairs[:, 1]), pair_features)

    def embed(self, blocks: list[Block], x: Tensor) -> Tensor:
        """[num_seeds, hidden] embeddings of the blocks' seeds from their input rows `x`."""
        return self.encoder(blocks, F.normalize(x, dim=-1))


class NodeEmbeddings(nn.Module):
    """A learned `[num_nodes, width]` input row per node, updated sparsely (see the module docstring).

    Under torchrun the table is one shared-memory segment per machine, WholeGraph's way: each
    machine's local rank 0 creates it (rows drawn from `seed`, so every machine's copy starts
    alike), every local rank maps it, and the segment's name is unlinked as soon as they all
    have, so nothing is left in /dev/shm after the job, a crash or a kill. The row-wise Adam
    state (`exp_avg`, `exp_avg_sq`, `steps`) lives in the same segment. Out of torchrun the
    table is this process's memory.

    Buffers, not parameters: the dense optimizer and DDP leave them alone; they are saved in
    checkpoints with the model and a restore writes into the shared table.
    """

    weight: Tensor  # the buffers of TABLE_BUFFERS: the rows and their Adam state
    exp_avg: Tensor
    exp_avg_sq: Tensor
    steps: Tensor

    def __init__(self, num_nodes: int, width: int, *, lr: float, seed: int | None = None) -> None:
        super().__init__()
        self.lr = lr
        self.local_rank, self.local_world = 0, 1
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        if _distributed():
            self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
            table = _shared_table(num_nodes, width, self.local_rank, generator)
        else:
            table = _private_table(num_nodes, width, generator)
        self.shared = _distributed()
        for name, tensor in table.items():
            self.register_buffer(name, tensor)

    @property
    def num_nodes(self) -> int:
        return int(self.weight.shape[0])

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> NodeEmbeddings:
        # a shared table stays in host shared memory whatever device the model moves to: rows() moves rows
        return self if self.shared else super()._apply(fn, recurse)

    def rows(self, ids: Tensor, device: torch.device | None = None) -> Tensor:
        """The rows of `ids` (on `device`, default the table's) as a leaf that collects their gradient."""
        rows = self.weight.index_select(0, ids.to(self.weight.device))
        return rows.to(device or self.weight.device).requires_grad_(True)

    @torch.no_grad()
    def apply_gradients(self, ids: Tensor, grad: Tensor) -> int:
        """Every rank's row gradients (all-gathered, averaged over ranks), then one lazy Adam step on
        the rows they touch, each machine's rows split among its local ranks (row % local ranks), then
        a barrier so no rank reads a row before it is written. Every rank must call it once per step;
        returns the rows this rank updated."""
        ids, grad = all_gather_rows(ids.to(self.weight.device), grad.to(self.weight.device))
        if ids.numel():
            rows, inverse = torch.unique(ids, return_inverse=True)
            summed = torch.zeros(rows.numel(), grad.shape[1], dtype=grad.dtype, device=grad.device)
            summed.index_add_(0, inverse, grad)
            summed /= dist.get_world_size() if _distributed() else 1
            if self.local_world > 1:
                mine = rows % self.local_world == self.local_rank
                rows, summed = rows[mine], summed[mine]
            self._adam(rows, summed)
        else:
            rows = ids
        if _distributed():
            dist.barrier()
        return int(rows.numel())

    def _adam(self, rows: Tensor, summed: Tensor) -> None:
        row_adam_step(self.weight, self.exp_avg, self.exp_avg_sq, self.steps, rows, summed, lr=self.lr)


TABLE_BUFFERS = ("weight", "exp_avg", "exp_avg_sq", "steps")
_TABLE_LABEL = "link-embeddings"


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _table_layout(num_nodes: int, width: int) -> list[tuple[str, tuple[int, ...], torch.dtype, int]]:
    """(buffer, shape, dtype, byte offset) of the table's parts in one segment."""
    floats = num_nodes * width * 4
    return [
        ("weight", (num_nodes, width), torch.float32, 0),
        ("exp_avg", (num_nodes, width), torch.float32, floats),
        ("exp_avg_sq", (num_nodes, width), torch.float32, 2 * floats),
        ("steps", (num_nodes,), torch.int64, 3 * floats),
    ]


def _private_table(num_nodes: int, width: int, generator: torch.Generator | None) -> dict[str, Tensor]:
    return {
        "weight": torch.randn(num_nodes, width, generator=generator) / math.sqrt(width),
        "exp_avg": torch.zeros(num_nodes, width),
        "exp_avg_sq": torch.zeros(num_nodes, width),
        "steps": torch.zeros(num_nodes, dtype=torch.int64),
    }


def _shared_table(num_nodes: int, width: int, local_rank: int, generator: torch.Generator | None) -> dict[str, Tensor]:
    """This machine's table (see `NodeEmbeddings`); every rank must call it."""
    layout = _table_layout(num_nodes, width)
    nbytes = 3 * num_nodes * width * 4 + num_nodes * 8
    owner, name, views = None, "", {}
    if local_rank == 0:
        owner = SegmentOwner()
        segment = owner.create(_TABLE_LABEL, nbytes)  # zero-filled: the Adam state starts at zero
        name = segment.name
        views = {part: segment.view(shape, dtype, offset) for part, shape, dtype, offset in layout}
        views["weight"].copy_(torch.randn(num_nodes, width, generator=generator) / math.sqrt(width))
    try:
        names: list[str] = [""] * dist.get_world_size()
        dist.all_gather_object(names, name)
        if local_rank != 0:
            mapping, _ = map_segment(names[dist.get_rank() - local_rank], writable=True)  # this machine's
            views = {
                part: view_of_mapping(mapping, shape, dtype, offset, read_only=False)
                for part, shape, dtype, offset in layout
            }
        dist.barrier()  # every local rank has mapped it: the name can go, the memory stays while mapped
    finally:
        if owner is not None:
            owner.close()
    return views
