"""Link prediction's model: a GNN encoder, a pair decoder and, for featureless graphs, learned node embeddings.

`LinkModel(blocks, x, pairs)` embeds a batch's seeds (every endpoint of its pairs) with one of
the built-in GNNs, its input rows scaled to unit length first (as PyG's link example normalises
Cora's features: unscaled bag-of-words rows make the first dot products so large that the
sigmoid saturates and nothing is learned), and scores each pair: `dot` (the dot product of the two embeddings), `mlp`
(an MLP over their element-wise product, as OGB's link examples) or `mlp+cn` (that MLP fed also the
pair's common-neighbour features, `PairStructure`: the overlap of the two neighbourhoods that two
independent embeddings cannot express, and on which Adamic-Adar beats plain GNNs). A graph without features
trains `NodeEmbeddings` instead, as WholeGraph's distributed embeddings do: the rows of a
batch's nodes are gathered as its input, their gradients scattered back to those rows only,
and a row-wise (lazy) Adam updates just the rows a batch touched. Every rank holds the table
and applies every rank's row gradients, all-gathered, in the same order, so the copies stay
identical without broadcasting the table.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.link import PAIR_FEATURE_DECODERS, DecoderKind
from graphtier.launcher.runtime.models import build_model
from graphtier.launcher.runtime.models.factory import ModelName
from graphtier.service.graph.common_neighbours import PAIR_FEATURE_NAMES
from graphtier.service.sampling import Block

_ADAM_BETAS = (0.9, 0.999)
_ADAM_EPS = 1e-8


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
    features (CN, Adamic-Adar, resource allocation; `PairStructure.features`)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.structure = nn.Sequential(
            nn.Linear(len(PAIR_FEATURE_NAMES), width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        self.layers = nn.Sequential(nn.Linear(2 * width, width), nn.ReLU(), nn.Linear(width, 1))

    def forward(self, left: Tensor, right: Tensor, pair_features: Tensor | None = None) -> Tensor:
        if pair_features is None:
            raise ValueError("the mlp+cn decoder scores a pair from its common-neighbour features: none were given")
        structure = self.structure(pair_features.to(left.device, left.dtype))
        return self.layers(torch.cat([left * right, structure], dim=-1)).squeeze(-1)


def build_decoder(kind: DecoderKind, width: int) -> nn.Module:
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

    def forward(self, blocks: list[Block], x: Tensor, pairs: Tensor, pair_features: Tensor | None = None) -> Tensor:
        """[P] logits of `pairs` (seed local ids) from the batch's blocks and input rows (and, for a
        decoder that `reads_pair_features`, the pairs' `PairStructure.features`)."""
        return self.score(self.embed(blocks, x), pairs, pair_features)

    def score(self, h: Tensor, pairs: Tensor, pair_features: Tensor | None = None) -> Tensor:
        """[P] logits of `pairs`, rows of the embeddings `h`."""
        return self.decoder(h.index_select(0, pairs[:, 0]), h.index_select(0, pairs[:, 1]), pair_features)

    def embed(self, blocks: list[Block], x: Tensor) -> Tensor:
        """[num_seeds, hidden] embeddings of the blocks' seeds from their input rows `x`."""
        return self.encoder(blocks, F.normalize(x, dim=-1))


class NodeEmbeddings(nn.Module):
    """A learned `[num_nodes, width]` input row per node, updated sparsely (see the module docstring).

    Buffers, not parameters: the dense optimizer and DDP leave them alone; they are saved in
    checkpoints with the model.
    """

    def __init__(self, num_nodes: int, width: int, *, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.register_buffer("weight", torch.randn(num_nodes, width) / math.sqrt(width))
        self.register_buffer("exp_avg", torch.zeros(num_nodes, width))
        self.register_buffer("exp_avg_sq", torch.zeros(num_nodes, width))
        self.register_buffer("steps", torch.zeros(num_nodes, dtype=torch.int64))

    @property
    def num_nodes(self) -> int:
        return int(self.weight.shape[0])

    def rows(self, ids: Tensor) -> Tensor:
        """The rows of `ids` as a leaf that collects their gradient."""
        return self.weight.index_select(0, ids.to(self.weight.device)).requires_grad_(True)

    @torch.no_grad()
    def apply_gradients(self, ids: Tensor, grad: Tensor) -> int:
        """Every rank's row gradients (all-gathered, averaged over ranks), then one lazy Adam step on
        the rows they touch. Every rank must call it once per step; returns the rows updated."""
        ids, grad = _all_gather_rows(ids.to(self.weight.device), grad)
        if ids.numel() == 0:
            return 0
        rows, inverse = torch.unique(ids, return_inverse=True)
        summed = torch.zeros(rows.numel(), grad.shape[1], dtype=grad.dtype, device=grad.device)
        summed.index_add_(0, inverse, grad)
        summed /= dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        beta1, beta2 = _ADAM_BETAS
        self.steps[rows] += 1
        step = self.steps[rows].to(grad.dtype).unsqueeze(1)
        m = self.exp_avg[rows].mul_(beta1).add_(summed, alpha=1 - beta1)
        v = self.exp_avg_sq[rows].mul_(beta2).addcmul_(summed, summed, value=1 - beta2)
        self.exp_avg[rows], self.exp_avg_sq[rows] = m, v
        update = (m / (1 - beta1**step)) / ((v / (1 - beta2**step)).sqrt() + _ADAM_EPS)
        self.weight[rows] -= self.lr * update
        return int(rows.numel())


def _all_gather_rows(ids: Tensor, grad: Tensor) -> tuple[Tensor, Tensor]:
    """Every rank's (ids, grad) concatenated in rank order; this rank's alone when not distributed."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ids, grad
    world = dist.get_world_size()
    count = torch.tensor([ids.numel()], dtype=torch.int64, device=ids.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in counts]
    longest = max(sizes)
    padded_ids = torch.zeros(longest, dtype=ids.dtype, device=ids.device)
    padded_ids[: ids.numel()] = ids
    padded_grad = torch.zeros(longest, grad.shape[1], dtype=grad.dtype, device=grad.device)
    padded_grad[: ids.numel()] = grad
    all_ids = [torch.empty_like(padded_ids) for _ in range(world)]
    all_grads = [torch.empty_like(padded_grad) for _ in range(world)]
    dist.all_gather(all_ids, padded_ids)
    dist.all_gather(all_grads, padded_grad)
    return (
        torch.cat([t[:n] for t, n in zip(all_ids, sizes, strict=True)]),
        torch.cat([t[:n] for t, n in zip(all_grads, sizes, strict=True)]),
    )
