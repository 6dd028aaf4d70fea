"""Link prediction on a heterogeneous graph's target relation: the batches, the model and its evaluation.

A heterogeneous dataset prepared with `--edge-split ... --target-relation HEAD-REL-TAIL` holds that
relation's train, val and test pairs (head first, global ids) and negative pools pairing the
head type with the tail type (`service/prepared/relation_split.py`). `HeteroLinkModel` is a heterogeneous
encoder (R-GCN, R-GAT or HGT; featureless types learn embeddings) and a pair decoder from `link_model`
(`dot` or `mlp`). `evaluate_hetero_links` embeds every node of the head and tail types over its
whole neighbourhood and scores the splits by `link_eval`'s AUC, Hits@K and MRR, the MRR tails
drawn from the tail type.

`job submit --task link --model rgcn|rgat|hgt` trains it in the built-in loop (`objectives.LinkPrediction`,
with `hetero_pair_forward`) on batches its producers sample (`LinkSampler`); `HeteroLinkBatches`
samples the same batches in the trainer's own process (a rank's shard of the train pairs each
epoch as the job's `EpochPlan` says, each positive with `negatives` negatives of the relation's
types, the union of all endpoints sampled once with the heterogeneous sampler: a producer's batch for
the same seed, epoch, rank and step) and gives the evaluation its embedding batches, from a
prepared dataset on disk or one attached from the daemon's tiers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError, SamplingError
from graphtier.contract.hetero import HeteroSchema
from graphtier.contract.link import DEFAULT_HITS_K, PAIR_FEATURE_DECODERS, DecoderKind, NegativeSampling
from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches
from graphtier.launcher.runtime.link_eval import SplitScores, auc, hits_at_k, mrr, mrr_tails
from graphtier.launcher.runtime.link_model import build_decoder
from graphtier.launcher.runtime.models.factory import ModelName, build_hetero_model
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.epoch_plan import EpochPlan, eval_batches
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.edge_split import LINK_ARRAY_PREFIX, link_array
from graphtier.service.sampling.link import LinkSampler, pair_end_types
from graphtier.service.store import AttachedDataset


@dataclass(frozen=True)
class HeteroLinkBatch:
    """Train pairs and their negatives over a heterogeneous sample of all their endpoints."""

    batch: Batch  # the sample; its seeds are the distinct endpoints
    pairs: Tensor  # int64 [P, 2]: seed positions (head, tail), positives first
    num_positive: int


class HeteroLinkBatches(HeteroLocalBatches):
    """One rank's link-prediction batches of a heterogeneous dataset's target relation (module docstring)."""

    def __init__(
        self,
        dataset: PreparedDataset | AttachedDataset,
        fanouts: Sequence[str | int],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        *,
        negatives: int = 1,
        negative_sampling: NegativeSampling = "corrupt-tail",
        eval_fanouts: Sequence[str | int] | None = None,
        eval_batch_size: int | None = None,
    ) -> None:
        """`negative_sampling`: corrupt-tail (the positive's head, a random tail of the tail type) or
        uniform (a random head and tail of the relation's types), as a link job's producers draw them."""
        super().__init__(
            dataset, fanouts, batch_size, rank, world_size, seed, eval_fanouts=eval_fanouts,
            eval_batch_size=eval_batch_size,
        )  # fmt: skip
        if isinstance(negatives, bool) or not isinstance(negatives, int) or negatives < 1:
            raise GraphtierError(f"negatives must be an int >= 1, got {negatives!r}")
        if isinstance(dataset, AttachedDataset):
            pairs = dataset.link_pairs
        else:
            names = [name for name in dataset.manifest.arrays if name.startswith(LINK_ARRAY_PREFIX)]
            pairs = {name: dataset.array(name) for name in names}
        if link_array("train") not in pairs:
            raise GraphtierError(
                f"dataset {self.name!r} has no edge split of a relation: prepare it with "
                "`graphtier dataset prepare ogb:DIR --edge-split 0.85,0.05,0.10 --target-relation HEAD-REL-TAIL`"
            )
        self._pairs = pairs
        self.train_pairs = pairs[link_array("train")]
        self.head, self.tail = pair_end_types(self.schema, self.train_pairs)
        self.negatives = negatives
        self.link_sampler = LinkSampler(
            self.sampler,
            self.train_pairs,
            self.schema.num_nodes,
            negatives=negatives,
            negative_sampling=negative_sampling,
        )

    def split_pairs(self, split: str, *, negative: bool = False) -> Tensor:
        """int64 [n, 2] pairs (head first, global ids) of `split`, or its pool of negatives."""
        return self._pairs[link_array(split, negative=negative)]

    @cached_property
    def link_plan(self) -> EpochPlan:
        """This rank's epoch plan over the train pairs (their indices, as a link job's producers plan them)."""
        count = self.train_pairs.shape[0]
        try:
            return EpochPlan(count, self.batch_size, self.seed, self.rank, self.world_size, unit="train edges")
        except SamplingError as exc:
            raise SamplingError(f"dataset {self.name!r}: {exc}") from None

    def link_steps_per_epoch(self) -> int:
        """Batches of train pairs per epoch on this rank (the same on every rank)."""
        return self.link_plan.steps_per_epoch

    def pairs_epoch(self, epoch: int) -> Iterator[HeteroLinkBatch]:
        """This rank's batches of train pairs of `epoch` (every rank the same number of steps)."""
        edges = torch.arange(self.train_pairs.shape[0])
        for _, chosen, sample_seed in self.link_plan.batches(edges, epoch):
            sub = self.link_sampler.sample(chosen, seed=sample_seed)
            assert sub.pairs is not None  # a link sample's
            batch = self._gathered(sub, sub.node_ids[: sub.num_seeds], sample_seed)
            yield HeteroLinkBatch(batch, sub.pairs, sub.num_positive)

    def embedding_batches(self, ids: Tensor) -> Iterator[tuple[Tensor, Batch]]:
        """This rank's share of `ids` (unique global ids), sampled by the evaluation sampler in batches."""
        planned = eval_batches(ids, self.eval_batch_size, seed=self.seed, rank=self.rank, world_size=self.world_size)
        for _, seeds, sample_seed in planned:
            yield seeds, self._batch(self.eval_sampler, seeds, sample_seed)


class HeteroLinkModel(nn.Module):
    """A heterogeneous encoder (`model` rgcn, rgat or hgt, output `hidden` wide) and a pair decoder (dot or mlp);
    `forward` scores a batch's pairs."""

    reads_pair_features = False  # its decoders score embeddings alone (no common-neighbour features)

    def __init__(
        self,
        schema: HeteroSchema,
        hidden: int,
        layers: int = 2,
        *,
        model: ModelName = "rgcn",
        decoder: DecoderKind = "dot",
        dropout: float = 0.5,
        heads: int = 4,
        featureless: FeaturelessOptions | None = None,
    ) -> None:
        super().__init__()
        if decoder in PAIR_FEATURE_DECODERS:
            raise ValueError(
                f"the {decoder} decoder reads common-neighbour features of a graph with one edge type; "
                "a heterogeneous graph's target relation is scored by the dot or mlp decoder"
            )
        self.hidden = hidden
        self.encoder = build_hetero_model(model, schema, hidden, hidden, layers, dropout, heads, featureless)
        self.decoder = build_decoder(decoder, hidden)

    def embed(self, batch: Batch) -> Tensor:
        """[num_seeds, hidden] embeddings of the batch's seeds; input rows scaled to unit length (as
        `LinkModel` scales them: bag-of-words rows would saturate the first dot products)."""
        ids, types = batch.input_nodes
        assert isinstance(batch.x, dict)  # a heterogeneous batch's rows, per type (input_nodes refuses any other)
        features = {name: F.normalize(rows, dim=-1) for name, rows in batch.x.items()}
        return self.encoder(batch.blocks, batch.edge_types, ids, types, features)

    def forward(self, batch: Batch, pairs: Tensor) -> Tensor:
        """[P] logits of `pairs` (seed positions)."""
        h = self.embed(batch)
        return self.decoder(h.index_select(0, pairs[:, 0]), h.index_select(0, pairs[:, 1]))


def hetero_pair_forward(model: nn.Module, batch: Batch, pairs: Tensor) -> Tensor:
    """The link loop's call of a `HeteroLinkModel` (or its DDP wrapper): [P] logits of a batch's pairs."""
    return model(batch, pairs)


def link_loss(model: nn.Module, item: HeteroLinkBatch) -> Tensor:
    """Binary cross-entropy of a batch's pairs: positives 1, negatives 0."""
    logits = model(item.batch, item.pairs)
    target = torch.zeros_like(logits)
    target[: item.num_positive] = 1.0
    return F.binary_cross_entropy_with_logits(logits, target)


@torch.no_grad()
def evaluate_hetero_links(
    model: HeteroLinkModel,
    loader: HeteroLinkBatches,
    splits: tuple[str, ...] = ("val", "test"),
    hits_k: int = DEFAULT_HITS_K,
    kept: dict[str, SplitScores] | None = None,
) -> dict[str, float]:
    """`<split>_auc`, `<split>_mrr` and `<split>_hits@K` over all ranks (every rank must call it); `kept`,
    when given, receives each split's scores.

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
            positives = loader.split_pairs(split)
            if positives.shape[0] == 0:
                continue
            pos = score(positives)
            neg = score(loader.split_pairs(split, negative=True))
            tails = mrr_tails(split, positives, tail.count) + tail.offset
            heads = positives[:, :1].expand_as(tails)
            tail_scores = score(torch.stack([heads.reshape(-1), tails.reshape(-1)], dim=1)).view_as(tails)
            results[f"{split}_auc"] = auc(pos, neg)
            results[f"{split}_mrr"] = mrr(pos, tail_scores)
            results[f"{split}_hits@{hits_k}"] = hits_at_k(pos, neg, hits_k)
            if kept is not None:
                negatives = loader.split_pairs(split, negative=True)
                kept[split] = SplitScores(positives, pos, negatives, neg, tails, tail_scores)
        return results
    finally:
        model.train(was_training)
