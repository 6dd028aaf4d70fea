"""Tiering a heterogeneous graph: one byte budget across node types of different widths, hit ratios per type.

A tier's byte budget is split across types by score: every featured row of every type is
ranked by its score (the whole heterogeneous graph's), and the hottest rows are taken until the
budget is full. Because prepare reorders each type's rows by score within the type's id range,
the rows a type gets are a prefix of its range (`HeteroSplit.rows`), so a row's tier still
follows from its id. Ranking by score (the expected reads of a row) rather than score per
byte is what maximises the *byte* hit ratio: a row of width w costs w bytes and serves
reads x w bytes, so its value per budget byte is its read count whatever its width.

`build_hetero_tiering_report` replays sampled epochs with the heterogeneous sampler (a one-rank
job's batches, for as long as `replay.replay_reads` decides) and compares each score's placement
with the oracle's (placed by the very reads it is scored on), per type and over all bytes.
Featureless types have no feature rows; their learned embeddings live in the model and take no
part in the budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from pydantic import BaseModel, Field

from graphtier.contract.errors import PlacementError
from graphtier.contract.hetero import HeteroSchema
from graphtier.service.hotness import ScoreSpec, compute_scores
from graphtier.service.placement import PlacementPlan, TierBudgets, parse_budget
from graphtier.service.prepared.dataset import PreparedDataset
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler
from graphtier.service.tiering.replay import AccessReplay, Estimate, ReplayCoverage, replay_reads


class HeteroSplit(BaseModel):
    """Rows (a prefix of each featured type's range, in the ranking's order) a byte budget holds."""

    budget_bytes: int
    rows: dict[str, int] = Field(description="rows of each featured type inside the budget")
    used_bytes: int


def featured_bytes(schema: HeteroSchema) -> int:
    return sum(t.count * t.row_bytes for t in schema.node_types)


def split_budget(schema: HeteroSchema, scores: torch.Tensor, budget_bytes: int) -> HeteroSplit:
    """The hottest featured rows of all types by `scores` (global ids) that fit in `budget_bytes`.

    Rows are taken in descending score across types (ties: lower global id first) until the
    next one does not fit; a type's rows inside the budget are counted, so where `scores` orders each type's range
    (as a prepared dataset's do) they are the first `rows[type]` ids of the type.
    """
    featured = [t for t in schema.node_types if not t.featureless]
    if not featured:
        return HeteroSplit(budget_bytes=budget_bytes, rows={}, used_bytes=0)
    ids = torch.cat([torch.arange(t.offset, t.offset + t.count) for t in featured])
    widths = torch.cat([torch.full((t.count,), t.row_bytes, dtype=torch.int64) for t in featured])
    order = torch.sort(scores[ids], descending=True, stable=True).indices
    cumulative = torch.cumsum(widths[order], 0)
    taken = order[cumulative <= budget_bytes]  # the longest prefix of the ranking that fits
    chosen = ids[taken]
    rows = {}
    for info in featured:
        rows[info.name] = int(((chosen >= info.offset) & (chosen < info.offset + info.count)).sum())
    return HeteroSplit(budget_bytes=budget_bytes, rows=rows, used_bytes=int(widths[taken].sum()))


def hetero_plans(schema: HeteroSchema, scores: torch.Tensor, budgets: TierBudgets) -> dict[str, PlacementPlan]:
    """Each featured type's `PlacementPlan` over its own (type-local) rows, the tiers' byte budgets
    split across types as `split_budget` splits them: a tier's budget, added to the hotter tiers',
    takes the hottest rows of all types. The daemon loads a heterogeneous dataset with these plans, so
    it serves the placement `dataset tiering-report` scores. Interleaved rows round down to a
    multiple of the devices per type; `host_bytes` None puts every other row on the host tier."""
    devices = budgets.num_devices
    replicated = split_budget(schema, scores, budgets.device_replicated_bytes).rows
    on_device = split_budget(schema, scores, budgets.device_replicated_bytes + budgets.device_interleaved_bytes).rows
    hot_bytes = budgets.device_replicated_bytes + budgets.device_interleaved_bytes
    in_host = None if budgets.host_bytes is None else split_budget(schema, scores, hot_bytes + budgets.host_bytes).rows
    plans = {}
    for info in schema.node_types:
        if info.featureless:
            continue
        first = replicated[info.name]
        shared = (on_device[info.name] - first) // devices * devices if devices else 0
        host_end = info.count if in_host is None else max(in_host[info.name], first + shared)
        plans[info.name] = PlacementPlan(
            num_nodes=info.count,
            row_bytes=info.row_bytes,
            num_devices=devices,
            replicated_end=first,
            interleaved_end=first + shared,
            host_end=host_end,
        )
    return plans


def _inside_budget(schema: HeteroSchema, scores: torch.Tensor, budget_bytes: int) -> torch.Tensor:
    """Global ids of the featured rows inside the budget when `scores` ranks the rows."""
    featured = [t for t in schema.node_types if not t.featureless]
    ids = torch.cat([torch.arange(t.offset, t.offset + t.count) for t in featured])
    widths = torch.cat([torch.full((t.count,), t.row_bytes, dtype=torch.int64) for t in featured])
    order = torch.sort(scores[ids], descending=True, stable=True).indices
    return ids[order[torch.cumsum(widths[order], 0) <= budget_bytes]]


def _hit_bytes(schema: HeteroSchema, reads: torch.Tensor, inside: torch.Tensor) -> dict[str, int]:
    """Bytes read from the rows `inside` the budget, per featured type."""
    out = {}
    for info in schema.node_types:
        if not info.featureless:
            mine = inside[(inside >= info.offset) & (inside < info.offset + info.count)]
            out[info.name] = int(reads[mine].sum()) * info.row_bytes
    return out


def _read_bytes(schema: HeteroSchema, reads: torch.Tensor) -> dict[str, int]:
    """Feature bytes read of each featured type."""
    featured = [t for t in schema.node_types if not t.featureless]
    return {t.name: int(reads[t.offset : t.offset + t.count].sum()) * t.row_bytes for t in featured}


def _distinct_bytes(schema: HeteroSchema, reads: torch.Tensor) -> int:
    """Feature bytes of the rows read at least once."""
    featured = [t for t in schema.node_types if not t.featureless]
    return sum(int((reads[t.offset : t.offset + t.count] > 0).sum()) * t.row_bytes for t in featured)


def _settling_figures(schema: HeteroSchema, inside: dict[str, torch.Tensor], budget_bytes: int) -> Estimate:
    """The replay's estimate: each placement's byte hit ratio (`inside` per score), the oracle's,
    and how full the rows read so far would fill the budget (at most 1)."""

    def estimate(reads: torch.Tensor) -> torch.Tensor:
        placed = [*inside.values(), _inside_budget(schema, reads.to(torch.float64), budget_bytes)]
        total = max(sum(_read_bytes(schema, reads).values()), 1)
        fill = min(_distinct_bytes(schema, reads) / budget_bytes, 1.0) if budget_bytes else 1.0
        ratios = [sum(_hit_bytes(schema, reads, ids).values()) / total for ids in placed]
        return torch.tensor([*ratios, fill], dtype=torch.float64)

    return estimate


class TypeOutcome(BaseModel):
    node_type: str
    row_bytes: int
    read_bytes: int = Field(description="feature bytes the replayed batches read of this type")
    hit_ratio: float = Field(description="share of this type's read bytes served by the budget")


class HeteroScoreOutcome(BaseModel):
    score: str
    hit_ratio: float = Field(description="bytes served by the budget / all feature bytes read")
    ratio_to_oracle: float
    per_type: list[TypeOutcome]


class HeteroTieringReport(BaseModel):
    dataset: str
    budget: str
    budget_bytes: int
    featured_bytes: int
    fanouts: list[str]
    batch_size: int
    epochs: int
    batches: int
    read_bytes_per_epoch: float
    coverage: ReplayCoverage = Field(description="how much the replay covered and whether its figures are reliable")
    featureless_types: list[str] = Field(description="types whose rows are learned embeddings, not tiered")
    outcomes: list[HeteroScoreOutcome]

    def outcome(self, score: str) -> HeteroScoreOutcome:
        return next(o for o in self.outcomes if o.score == score)


def replay_hetero_reads(
    dataset: PreparedDataset,
    *,
    fanouts: Sequence[str | int],
    batch_size: int,
    epochs: int | None,
    seed: int,
    estimate: Estimate | None = None,
) -> AccessReplay:
    """Reads of each node's row over a one-rank job's epochs (`replay_reads`: `epochs`, or None
    until `estimate` settles)."""
    schema = dataset.manifest.hetero
    assert schema is not None
    sampler = HeteroNeighborSampler(dataset.graph, dataset.array("edge_type"), schema, fanouts)
    return replay_reads(
        sampler,
        dataset.split("train"),
        schema.num_nodes,
        batch_size=batch_size,
        epochs=epochs,
        seed=seed,
        estimate=estimate,
    )


def build_hetero_tiering_report(
    dataset: PreparedDataset,
    *,
    budget: str,
    fanouts: Sequence[str | int] = ("10", "5"),
    batch_size: int = 1024,
    epochs: int | None = None,
    seed: int = 0,
) -> HeteroTieringReport:
    """Replay epochs once (`epochs` of them, or None: until the hit ratios settle), then score each
    placement (as prepared, rpr, degree, source order, random, oracle) at one byte budget."""
    schema = dataset.manifest.hetero
    if schema is None:
        raise PlacementError(
            f"dataset {dataset.name!r} is not a heterogeneous graph; use the homogeneous tiering report"
        )
    total = featured_bytes(schema)
    if total == 0:
        raise PlacementError(f"dataset {dataset.name!r} has no node type with features: nothing to tier")
    budget_bytes = parse_budget(budget, total_bytes=total, what="--budget")
    if budget_bytes > total:
        raise PlacementError(f"--budget {budget} is {budget_bytes:,} bytes, more than the {total:,} feature bytes")
    n = schema.num_nodes
    candidates = {
        f"as prepared ({dataset.manifest.score.get('label', '?')})": dataset.scores,
        "rpr": compute_scores(dataset.graph, ScoreSpec(kind="rpr")),
        "degree": compute_scores(dataset.graph, ScoreSpec(kind="degree")),
        "source order": -dataset.new_to_old.to(torch.float64),
        "random": torch.rand(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64),
    }
    inside = {name: _inside_budget(schema, scores, budget_bytes) for name, scores in candidates.items()}
    replay = replay_hetero_reads(
        dataset,
        fanouts=fanouts,
        batch_size=batch_size,
        epochs=epochs,
        seed=seed,
        estimate=_settling_figures(schema, inside, budget_bytes),
    )
    reads = replay.counts
    inside["oracle"] = _inside_budget(schema, reads.to(torch.float64), budget_bytes)
    featured = [t for t in schema.node_types if not t.featureless]
    read_bytes = _read_bytes(schema, reads)
    all_read = max(sum(read_bytes.values()), 1)
    oracle_hits = sum(_hit_bytes(schema, reads, inside["oracle"]).values())
    outcomes = []
    for name, ids in inside.items():
        hits = _hit_bytes(schema, reads, ids)
        outcomes.append(
            HeteroScoreOutcome(
                score=name,
                hit_ratio=sum(hits.values()) / all_read,
                ratio_to_oracle=sum(hits.values()) / oracle_hits if oracle_hits else 1.0,
                per_type=[
                    TypeOutcome(
                        node_type=t.name,
                        row_bytes=t.row_bytes,
                        read_bytes=read_bytes[t.name],
                        hit_ratio=hits[t.name] / read_bytes[t.name] if read_bytes[t.name] else 0.0,
                    )
                    for t in featured
                ],
            )
        )
    rows_read = sum(int((reads[t.offset : t.offset + t.count] > 0).sum()) for t in featured)
    return HeteroTieringReport(
        dataset=dataset.name,
        budget=str(budget),
        budget_bytes=budget_bytes,
        featured_bytes=total,
        fanouts=[str(f) for f in fanouts],
        batch_size=batch_size,
        epochs=replay.epochs,
        batches=replay.batches,
        read_bytes_per_epoch=all_read / replay.epochs,
        coverage=replay.coverage(rows_read=rows_read, budget_holds_them=_distinct_bytes(schema, reads) <= budget_bytes),
        featureless_types=[t.name for t in schema.node_types if t.featureless],
        outcomes=outcomes,
    )
