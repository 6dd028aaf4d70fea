"""Evaluating link prediction as OGB does: AUC, Hits@K and MRR over the dataset's edge split.

Every node is embedded once (each rank encodes its share of the nodes over their whole
neighbourhoods, as full-batch inference does, the shares summed over ranks), then each
split's positive pairs are scored against

- the split's pool of random negative pairs fixed at prepare (`link_<split>_neg`): AUC (the
  chance a positive outscores a negative, ties counted half) and Hits@K (ogbl-collab: the
  share of positives scoring above the K-th best negative);
- `DEFAULT_MRR_NEGATIVES` corrupted tails per positive (ogbl-citation2: the positive's source
  with random tails, drawn with a fixed seed so every job ranks against the same tails): MRR,
  the mean reciprocal rank of each positive among its tails (ties counted half).

Every rank computes the same figures from the same embeddings, so no rank waits on another
past the one all-reduce. A rank's share of the nodes and the sample seed of each of its
batches are the epoch plan's evaluation batches (graphtier.service.pipeline.epoch_plan). The
scores a split's figures come from can be kept (`SplitScores`), so that they can be recomputed
elsewhere (OGB's `Evaluator` gives the same Hits@K and MRR: a positive above the K-th best
negative, ties against it counted as misses; a rank among its own tails with ties counted half).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from graphtier.contract.link import DEFAULT_HITS_K, DEFAULT_MRR_NEGATIVES
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.link_model import (
    CALIBRATION_WEIGHTS,
    LinkModel,
    NodeEmbeddings,
    ResidualAdamicAdarDecoder,
)
from graphtier.service.gather import tiered_gather
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.pipeline.batch import blocks_to
from graphtier.service.pipeline.epoch_plan import eval_batches, mix_seed
from graphtier.service.prepared.edge_split import link_array
from graphtier.service.sampling import NeighborSampler
from graphtier.service.store import AttachedDataset

_MRR_STREAM = 0x4D5252  # seeds the corrupted tails of the MRR protocol


@dataclass(frozen=True)
class SplitScores:
    """The scores one split's figures are computed from: its positive pairs, its pool of negative
    pairs (AUC, Hits@K) and each positive's corrupted tails (MRR; the pair is the positive's head and
    the tail), in graphtier's ids."""

    positive_pairs: Tensor  # int64 [P, 2]
    positive: Tensor  # float32 [P]
    negative_pairs: Tensor  # int64 [N, 2]
    negative: Tensor  # float32 [N]
    tails: Tensor  # int64 [P, T]
    tail_scores: Tensor  # float32 [P, T]


def auc(positive: Tensor, negative: Tensor) -> float:
    """P(a positive's score > a negative's), ties counted half (the Mann-Whitney U over |P| x |N|)."""
    ordered = negative.double().sort().values
    below = torch.searchsorted(ordered, positive.double(), right=False)
    not_above = torch.searchsorted(ordered, positive.double(), right=True)
    return float(((below + not_above).double() / 2).mean() / ordered.numel())


def hits_at_k(positive: Tensor, negative: Tensor, k: int) -> float:
    """Share of positives scoring above the k-th best negative (ogbl-collab's Hits@K)."""
    if negative.numel() < k:
        return 1.0
    kth = torch.topk(negative, k).values[-1]
    return float((positive > kth).double().mean())


def mrr(positive: Tensor, tails: Tensor) -> float:
    """Mean reciprocal rank of each positive [P] among its own negatives [P, T] (ties half, as OGB)."""
    optimistic = (tails >= positive.unsqueeze(1)).sum(dim=1)
    pessimistic = (tails > positive.unsqueeze(1)).sum(dim=1)
    rank = 0.5 * (optimistic + pessimistic).double() + 1
    return float((1.0 / rank).mean())


def mrr_tails(split: str, positives: Tensor, num_nodes: int) -> Tensor:
    """The fixed corrupted tails [P, DEFAULT_MRR_NEGATIVES] of a split's positives."""
    generator = torch.Generator().manual_seed(mix_seed(_MRR_STREAM, ("val", "test").index(split)))
    return torch.randint(num_nodes, (positives.shape[0], DEFAULT_MRR_NEGATIVES), generator=generator)


@torch.no_grad()
def node_embeddings(
    model: LinkModel,
    data: AttachedDataset,
    fanouts: list[int],
    batch_size: int,
    ctx: DistContext,
    embeddings: NodeEmbeddings | None,
    seed: int,
) -> Tensor:
    """[num_nodes, hidden] encoder output of every node: this rank's share sampled and encoded, summed over ranks."""
    num_nodes = data.graph.num_nodes
    sampler = NeighborSampler(data.graph, fanouts)
    tiers = data.feature_tiers() if embeddings is None else None
    out = torch.zeros(num_nodes, model.hidden, device=ctx.device)
    planned = eval_batches(torch.arange(num_nodes), batch_size, seed=seed, rank=ctx.rank, world_size=ctx.world_size)
    for _, seeds, sample_seed in planned:
        sub = sampler.sample(seeds, seed=sample_seed)
        if embeddings is not None:
            x = embeddings.weight.index_select(0, sub.node_ids.to(embeddings.weight.device))
        else:
            assert tiers is not None
            x = torch.empty((sub.num_nodes, *tiers.row_shape), dtype=tiers.dtype)
            tiered_gather(sub.node_ids, tiers, x)
        h = model.embed(blocks_to(sub.blocks(), ctx.device), x.to(ctx.device))
        out[seeds.to(ctx.device)] = h.float()
    ctx.all_reduce_sum(out)
    return out


@torch.no_grad()
def calibrate(
    decoder: ResidualAdamicAdarDecoder, learned: Tensor, pair_features: Tensor, num_positive: int, hits_k: int
) -> float:
    """Set the decoder's Adamic-Adar weight from validation pairs (`learned` scores, positives first)
    and return it: the largest of `CALIBRATION_WEIGHTS` whose scores `learned + weight *
    log1p(Adamic-Adar)` give a Hits@K within one standard error of the best weight's (the
    one-standard-error rule: the heuristic's order is the prior, left only for a gain the
    validation edges can tell from noise). The decoder's `calibration` keeps the figures at that
    weight and at 0."""
    learned = learned.double().cpu()
    heuristic = decoder.adamic_adar(pair_features).double().cpu()
    figures = {}
    for weight in CALIBRATION_WEIGHTS:
        combined = learned + weight * heuristic
        positive, negative = combined[:num_positive], combined[num_positive:]
        figures[weight] = (hits_at_k(positive, negative, hits_k), auc(positive, negative))
    best = max(hits for hits, _ in figures.values())
    standard_error = math.sqrt(best * (1 - best) / num_positive)
    weight = max(w for w, (hits, _) in figures.items() if hits >= best - standard_error)
    decoder.calibrated_weight.fill_(weight)
    decoder.calibration = {
        "weight": weight,
        f"val_hits@{hits_k}": figures[weight][0],
        "val_auc": figures[weight][1],
        f"learned_val_hits@{hits_k}": figures[0.0][0],
        "learned_val_auc": figures[0.0][1],
    }
    return weight


@torch.no_grad()
def link_metrics(
    model: LinkModel,
    z: Tensor,
    data: AttachedDataset,
    splits: tuple[str, ...],
    hits_k: int = DEFAULT_HITS_K,
    structure: PairStructure | None = None,
    kept: dict[str, SplitScores] | None = None,
) -> dict[str, float]:
    """split_auc, split_mrr and split_hits@K of each split, from the node embeddings `z` (and, for a
    decoder that reads pair features, `structure`, built from `data.graph` when not given); `kept`,
    when given, receives each split's `SplitScores`."""
    if model.reads_pair_features and structure is None:
        structure = PairStructure(data.graph)

    def score(pairs: Tensor) -> Tensor:
        features = structure.features(pairs) if model.reads_pair_features and structure is not None else None
        return model.score(z, pairs.to(z.device), features).float().cpu()

    decoder = model.decoder
    if isinstance(decoder, ResidualAdamicAdarDecoder) and data.link_pairs[link_array("val")].shape[0]:
        positives, negatives = data.link_pairs[link_array("val")], data.link_pairs[link_array("val", negative=True)]
        pairs = torch.cat([positives, negatives])
        decoder.calibrated_weight.fill_(0.0)  # in eval mode: the learned score alone
        assert structure is not None  # the decoder reads pair features
        features = structure.features(pairs)
        calibrate(decoder, model.score(z, pairs.to(z.device), features), features, positives.shape[0], hits_k)

    results: dict[str, float] = {}
    for split in splits:
        positives = data.link_pairs[link_array(split)]
        if positives.shape[0] == 0:
            continue
        pos = score(positives)
        neg = score(data.link_pairs[link_array(split, negative=True)])
        tails = mrr_tails(split, positives, z.shape[0])
        heads = positives[:, :1].expand_as(tails)
        tail_scores = score(torch.stack([heads.reshape(-1), tails.reshape(-1)], dim=1)).view_as(tails)
        results[f"{split}_auc"] = auc(pos, neg)
        results[f"{split}_mrr"] = mrr(pos, tail_scores)
        results[f"{split}_hits@{hits_k}"] = hits_at_k(pos, neg, hits_k)
        if kept is not None:
            negatives = data.link_pairs[link_array(split, negative=True)]
            kept[split] = SplitScores(positives, pos, negatives, neg, tails, tail_scores)
    return results


def evaluate_links(
    model: nn.Module,
    data: AttachedDataset,
    fanouts: list[int],
    batch_size: int,
    ctx: DistContext,
    embeddings: NodeEmbeddings | None,
    seed: int,
    splits: tuple[str, ...] = ("val", "test"),
    structure: PairStructure | None = None,
    kept: dict[str, SplitScores] | None = None,
) -> dict[str, float]:
    """Every split's metrics over all ranks (every rank must call it); the model back in training mode after.
    `kept` receives each split's scores (`link_metrics`)."""
    module = getattr(model, "module", model)  # a DDP wrapper is looked through
    assert isinstance(module, LinkModel)
    was_training = module.training
    module.eval()
    try:
        z = node_embeddings(module, data, fanouts, batch_size, ctx, embeddings, seed)
        return link_metrics(module, z, data, splits, structure=structure, kept=kept)
    finally:
        module.train(was_training)
