"""Link prediction on a typed graph's target relation, in the trainer's own process.

A typed dataset prepared with `--edge-split ... --target-relation HEAD-REL-TAIL` holds that
relation's train, val and test pairs (head first, global ids) and negative pools pairing the
head type with the tail type (`service/prepared/relation_split.py`). `TypedLinkBatches` gives a
rank its shard of the train pairs each epoch, each positive with `negatives` corrupted tails
(its head and uniform nodes of the tail type), and samples the union of all endpoints once with
the typed sampler, as `TypedLocalBatches` samples seed nodes. `TypedLinkModel` is an R-GCN
encoder (featureless types learn embeddings) and a pair decoder from `link_model`
(`dot` or `mlp`). `evaluate_typed_links` embeds every node of the head and tail types over
its whole neighbourhood and scores the splits by `link_eval`'s AUC, Hits@K and MRR, the MRR
tails drawn from the tail type.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.contract.link import DEFAULT_HITS_K, PAIR_FEATURE_DECODERS, DecoderKind
from graphtier.launcher.runtime.link_eval import auc, hits_at_k, mrr, mrr_tails
from graphtier.launcher.runtime.link_model import build_decoder
from graphtier.launcher.runtime.local_batches import _ceil_div, batch_seed
from graphtier.launcher.runtime.models.rgcn import RGCN
from graphtier.launcher.runtime.typed_batches import TypedBatch, TypedLocalBatches
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.edge_split import link_array

_NEGATIVE_STREAM = 0x4E4547  # seeds the corrupted tails of training batches
_EMBED_STREAM = 0xE3BE  # seeds the samples of the evaluation embeddings
_SEED_MASK = (1 << 63) - 1


@dataclass(frozen=True)
class TypedLinkBatch:
    """Train pairs and their negatives over a typed sample of all their endpoints."""

    batch: TypedBatch  # the sample; its seeds are the distinct endpoints
    pairs: Tensor  # int64 [P, 2]: seed positions (head, tail), positives first
    num_positive: int


class TypedLinkBatches(TypedLocalBatches):
    """One rank's link-prediction batches of a typed dataset's target relation (module docstring)."""

    def __init__(
        self,
        dataset: PreparedDataset,
        fanouts: Sequence[str | int],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        *,
        negatives: int = 1,
        eval_fanouts: Sequence[str | int] | None = None,
    ) -> None:
        super().__init__(dataset, fanouts, batch_size, rank, world_size, seed, eval_fanouts=eval_fanouts)
        split = dataset.manifest.link_split or {}
        key = split.get("target_relation")
        if key is None:
            raise GraphtierError(
                f"dataset {dataset.name!r} has no edge split of a relation: prepare it with "
                "`graphtier dataset prepare ogb:DIR --edge-split 0.85,0.05,0.10 --target-relation HEAD-REL-TAIL`"
            )
        if isinstance(negatives, bool) or not isinstance(negatives, int) or negatives < 1:
            raise GraphtierError(f"negatives must be an int >= 1, got {negatives!r}")
        self.relation = next(r for r in self.schema.relations if r.key == key)
        self.head = self.schema.type_named(self.relation.head)
        self.tail = self.schema.type_named(self.relation.tail)
        self.negatives = negatives
        self.train_pairs = dataset.array(link_array("train"))

    def link_steps_per_epoch(self) -> int:
        return _ceil_div(_ceil_div(self.train_pairs.shape[0], self.world_size), self.batch_size)

    def pairs_epoch(self, epoch: int) -> Iterator[TypedLinkBatch]:
        """This rank's batches of train pairs of `epoch` (every rank the same number of steps)."""
        count = self.train_pairs.shape[0]
        order = torch.randperm(count, generator=torch.Generator().manual_seed(self.seed * 7919 + epoch))
        per_rank = _ceil_div(count, self.world_size)
        padded = order.repeat(_ceil_div(per_rank * self.world_size, count))[: per_rank * self.world_size]
        for index, chosen in enumerate(padded[self.rank :: self.world_size].split(self.batch_size)):
            word = batch_seed(self.seed, epoch, self.rank, index)
            positive = self.train_pairs[chosen]
            generator = torch.Generator().manual_seed((word ^ _NEGATIVE_STREAM) & _SEED_MASK)
            tails = torch.randint(
                self.tail.offset, self.tail.offset + self.tail.count, (positive.shape[0] * self.negatives,),
                generator=generator,
            )  # fmt: skip
            negative = torch.stack([positive[:, 0].repeat(self.negatives), tails], dim=1)
            pairs = torch.cat([positive, negative])
            seeds, local = torch.unique(pairs.reshape(-1), return_inverse=True)
            yield TypedLinkBatch(self._batch(self.sampler, seeds, word), local.view(-1, 2), positive.shape[0])

    def embedding_batches(self, ids: Tensor) -> Iterator[tuple[Tensor, TypedBatch]]:
        """This rank's share of `ids` (unique global ids), sampled by the evaluation sampler in batches."""
        mine = ids[self.rank :: self.world_size]
        for index, seeds in enumerate(mine.split(self.batch_size)):
            yield seeds, self._batch(self.eval_sampler, seeds, batch_seed(self.seed, _EMBED_STREAM, self.rank, index))


class TypedLinkModel(nn.Module):
    """An R-GCN encoder (output `hidden` wide) and a pair decoder; `forward` scores a batch's pairs."""

    def __init__(
        self,
        schema: HeteroSchema,
        hidden: int,
        layers: int = 2,
        *,
        decoder: DecoderKind = "dot",
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        if decoder in PAIR_FEATURE_DECODERS:
            raise ValueError(
                f"the {decoder} decoder reads common-neighbour features of a graph with one edge type; "
                "a typed graph's target relation is scored by the dot or mlp decoder"
            )
        self.hidden = hidden
        self.encoder = RGCN(schema, hidden, hidden, layers, dropout=dropout)
        self.decoder = build_decoder(decoder, hidden)

    def embed(self, batch: TypedBatch) -> Tensor:
        """[num_seeds, hidden] embeddings of the batch's seeds; input rows scaled to unit length (as
        `LinkModel` scales them: bag-of-words rows would saturate the first dot products)."""
        ids, types = batch.input_nodes
        features = {name: F.normalize(rows, dim=-1) for name, rows in batch.features.items()}
        return self.encoder(batch.blocks, batch.edge_types, ids, types, features)

    def forward(self, batch: TypedBatch, pairs: Tensor) -> Tensor:
        """[P] logits of `pairs` (seed positions)."""
        h = self.embed(batch)
        return self.decoder(h.index_select(0, pairs[:, 0]), h.index_select(0, pairs[:, 1]))


def link_loss(model: nn.Module, item: TypedLinkBatch) -> Tensor:
    """Binary cross-entropy of a batch's pairs: positives 1, negatives 0."""
    logits = model(item.batch, item.pairs)
    target = torch.zeros_like(logits)
    target[: item.num_positive] = 1.0
    return F.binary_cross_entropy_with_logits(logits, target)


@torch.no_grad()
def evaluate_typed_links(
    model: TypedLinkModel,
    loader: TypedLinkBatches,
    splits: tuple[str, ...] = ("val", "test"),
    hits_k: int = DEFAULT_HITS_K,
) -> dict[str, float]:
    """`<split>_auc`, `<split>_mrr` and `<split>_hits@K` over all ranks (every rank must call it).

    Each rank embeds its share of the head and tail types' nodes, the shares are summed, and every
    rank scores the same pairs: the split's positives against its pool (AUC, Hits@K) and against
    `mrr_tails` corrupted tails of the tail type (MRR)."""
    was_training = model.training
    model.eval()
    try:
        head, tail = loader.head, loader.tail
        ids = torch.unique(torch.cat([torch.arange(t.offset, t.offset + t.count) for t in (head, tail)]))
        z = torch.zeros(loader.schema.num_nodes, model.hidden)
        for seeds, batch in loader.embedding_batches(ids):
            z[seeds] = model.embed(batch).float()
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(z)

        def score(pairs: Tensor) -> Tensor:
            return model.decoder(z.index_select(0, pairs[:, 0]), z.index_select(0, pairs[:, 1])).float()

        results: dict[str, float] = {}
        for split in splits:
            positives = loader.dataset.array(link_array(split))
            if positives.shape[0] == 0:
                continue
            pos = score(positives)
            neg = score(loader.dataset.array(link_array(split, negative=True)))
            tails = mrr_tails(split, positives, tail.count) + tail.offset
            heads = positives[:, :1].expand_as(tails)
            tail_scores = score(torch.stack([heads.reshape(-1), tails.reshape(-1)], dim=1)).view_as(tails)
            results[f"{split}_auc"] = auc(pos, neg)
            results[f"{split}_mrr"] = mrr(pos, tail_scores)
            results[f"{split}_hits@{hits_k}"] = hits_at_k(pos, neg, hits_k)
        return results
    finally:
        model.train(was_training)
