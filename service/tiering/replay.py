"""Replay sampled training epochs and count how often each node's feature row is read.

The epochs are a one-rank job's, batch for batch: its `EpochPlan` (graphtier.service.pipeline.
epoch_plan) shuffles and cuts the train ids and seeds each batch's sample as a producer does.

How long to replay. The oracle a report compares against is placed by the very reads it is
scored on, so a short replay flatters it: three batches of a small train split read few enough
rows that a 10% budget holds them all, and the oracle shows 100%. Unless told how many epochs,
the replay runs whole epochs until its figures settle: at least `MIN_RELIABLE_BATCHES` batches,
and the figures it tracks (`estimate`: a report's hit ratios, and how full the rows read would
fill the budget, which keeps rising while new rows are read and the budget still holds them all)
each within `SETTLED_WITHIN` of its value at half the batches or fewer. It stops unsettled at
`AUTO_MAX_READS` row reads or `AUTO_MAX_BATCHES` batches. Whatever its length, `ReplayCoverage`
says how many batches and distinct rows it replayed and, below that minimum or unsettled, that
its figures are not reliable and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import torch
from pydantic import BaseModel, Field

from graphtier.contract.errors import SamplingError
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.pipeline.epoch_plan import EpochPlan

if TYPE_CHECKING:
    from graphtier.service.sampling.subgraph import SampledSubgraph

MIN_RELIABLE_BATCHES = 32
"""Fewer replayed batches and a report's figures are not reliable (the oracle is scored on its own reads)."""
SETTLED_WITHIN = 0.01
"""Figures settled: each within this (one point) of its value at half the replayed batches or fewer."""
AUTO_MAX_READS = 500_000_000
"""Row reads (sampled nodes, summed over batches) after which a replay of unset length stops unsettled."""
AUTO_MAX_BATCHES = 8192
"""Batches after which a replay of unset length stops unsettled."""

StopReason = Literal["epochs", "settled", "read cap", "batch cap"]
Estimate = Callable[[torch.Tensor], torch.Tensor]
"""Read counts so far (int64 [N]) -> the figures whose settling ends a replay (shares, float64 [K])."""


class _Sampler(Protocol):
    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph: ...


class ReplayCoverage(BaseModel):
    """How much a replay covered, and whether figures measured on it can be trusted."""

    batches: int
    epochs: int
    reads: int = Field(description="sampled nodes summed over the batches (a row read each, where it has features)")
    distinct_rows: int = Field(description="feature rows read at least once")
    drift: float | None = Field(
        description="largest change of a tracked figure over the replay's later half (None: too few batches to tell)"
    )
    stopped: StopReason = Field(description="asked epochs done, figures settled, or a cap of an unset length hit")
    reliable: bool
    warning: str | None = Field(None, description="why the figures are not reliable; None when they are")


@dataclass(frozen=True)
class AccessReplay:
    """Per-node feature-row reads over `epochs` epochs of mini-batches."""

    counts: torch.Tensor  # int64 [N]
    epochs: int
    batches: int
    drift: float | None = None  # see ReplayCoverage.drift; None where nothing was tracked
    stopped: StopReason = "epochs"

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def coverage(self, *, rows_read: int | None = None, budget_holds_them: bool = False) -> ReplayCoverage:
        """The replay's `ReplayCoverage`. `rows_read`: distinct rows to report (default: nodes read at
        least once); `budget_holds_them`: the device budget holds every row read, so the oracle is
        100% by construction (said in the warning of a replay too short or unsettled)."""
        distinct = int((self.counts > 0).sum()) if rows_read is None else rows_read
        problems = []
        if self.batches < MIN_RELIABLE_BATCHES:
            problems.append(
                f"only {self.batches} batch{'es' if self.batches != 1 else ''} replayed, fewer than the "
                f"{MIN_RELIABLE_BATCHES} a reliable figure needs: the oracle is placed by the very reads it is "
                "scored on, so a short replay flatters it"
            )
        if self.drift is None:
            if self.batches >= MIN_RELIABLE_BATCHES:
                problems.append("the replay did not track its figures, so whether they settled is unknown")
        elif self.drift > SETTLED_WITHIN:
            problems.append(
                f"its figures still moved by up to {self.drift * 100:.1f} points over the replay's later half "
                f"(settled: within {SETTLED_WITHIN * 100:g} point)"
            )
        if problems and budget_holds_them:
            problems.append("the budget holds every row read, so the oracle is 100% by construction")
        if problems and self.stopped == "epochs":
            problems.append("omit --epochs to replay until the figures settle")
        elif problems and self.stopped in ("read cap", "batch cap"):
            limit = f"{AUTO_MAX_READS:,} row reads" if self.stopped == "read cap" else f"{AUTO_MAX_BATCHES:,} batches"
            problems.append(f"the replay stopped at its cap of {limit}; give --epochs to replay longer")
        return ReplayCoverage(
            batches=self.batches,
            epochs=self.epochs,
            reads=self.total,
            distinct_rows=distinct,
            drift=self.drift,
            stopped=self.stopped,
            reliable=not problems,
            warning="; ".join(problems) if problems else None,
        )


class _Checkpoints:
    """`estimate` at every power-of-two batch count, to measure how far it moved since half the batches."""

    def __init__(self, estimate: Estimate | None) -> None:
        self.estimate = estimate
        self.at: list[tuple[int, torch.Tensor]] = []

    def after_batch(self, batches: int, counts: torch.Tensor) -> bool:
        """Record a checkpoint where `batches` is a power of two; True when one was recorded."""
        if self.estimate is None or batches & (batches - 1):
            return False
        self.at.append((batches, self.estimate(counts)))
        return True

    def drift(self, batches: int, counts: torch.Tensor) -> float | None:
        """Largest change of the estimate since the last checkpoint at half of `batches` or fewer."""
        earlier = [figures for at, figures in self.at if 2 * at <= batches]
        if self.estimate is None or not earlier:
            return None
        now = self.at[-1][1] if self.at[-1][0] == batches else self.estimate(counts)
        return float((now - earlier[-1]).abs().max()) if now.numel() else 0.0


def replay_reads(
    sampler: _Sampler,
    train_ids: torch.Tensor,
    num_nodes: int,
    *,
    batch_size: int,
    epochs: int | None,
    seed: int = 0,
    estimate: Estimate | None = None,
    on_batch: Callable[[int, int | None], None] | None = None,
    observe: Callable[[torch.Tensor], None] | None = None,
) -> AccessReplay:
    """Sample a one-rank job's batches with `sampler`, every sampled node one row read: `epochs`
    epochs, or with None whole epochs until `estimate` settles (the module docstring's rule).
    `on_batch(done, total)` after each batch (total None when the length is unset);
    `observe(node_ids)` sees every batch's sampled nodes, in order."""
    plan = one_rank_plan(train_ids, batch_size, epochs, seed)
    counts = torch.zeros(num_nodes, dtype=torch.int64)
    total_batches = None if epochs is None else epochs * plan.steps_per_epoch
    checkpoints = _Checkpoints(estimate)
    done = epoch = reads = 0
    stopped: StopReason = "epochs"
    while epochs is None or epoch < epochs:
        checked = False
        for _, seeds, sample_seed in plan.batches(train_ids, epoch):
            node_ids = sampler.sample(seeds, seed=sample_seed).node_ids
            counts.index_add_(0, node_ids, torch.ones_like(node_ids))
            reads += node_ids.numel()
            if observe:
                observe(node_ids)
            done += 1
            checked |= checkpoints.after_batch(done, counts)
            if on_batch:
                on_batch(done, total_batches)
        epoch += 1
        if epochs is None:
            if done >= MIN_RELIABLE_BATCHES and checked:
                drift = checkpoints.drift(done, counts)
                if drift is not None and drift <= SETTLED_WITHIN:
                    stopped = "settled"
                    break
            if reads >= AUTO_MAX_READS:
                stopped = "read cap"
                break
            if done >= AUTO_MAX_BATCHES:
                stopped = "batch cap"
                break
    return AccessReplay(
        counts=counts, epochs=epoch, batches=done, drift=checkpoints.drift(done, counts), stopped=stopped
    )


def replay_access_counts(
    graph: CSCGraph,
    train_ids: torch.Tensor,
    *,
    fanouts: Sequence[int],
    batch_size: int,
    epochs: int | None,
    seed: int = 0,
    estimate: Estimate | None = None,
    on_batch: Callable[[int, int | None], None] | None = None,
    observe: Callable[[torch.Tensor], None] | None = None,
) -> AccessReplay:
    """`replay_reads` with the homogeneous `NeighborSampler` over `graph`."""
    from graphtier.service.sampling import NeighborSampler

    return replay_reads(
        NeighborSampler(graph, fanouts),
        train_ids,
        graph.num_nodes,
        batch_size=batch_size,
        epochs=epochs,
        seed=seed,
        estimate=estimate,
        on_batch=on_batch,
        observe=observe,
    )


def one_rank_plan(train_ids: torch.Tensor, batch_size: int, epochs: int | None, seed: int) -> EpochPlan:
    """The epoch plan of a one-rank job over `train_ids`; SamplingError for no ids or a bad size
    (`epochs` None: a replay of unset length)."""
    if train_ids.numel() == 0:
        raise SamplingError("the dataset has no training ids to start sampling from")
    if batch_size < 1 or (epochs is not None and epochs < 1):
        raise SamplingError(f"batch size and epochs must be >= 1, got {batch_size} and {epochs}")
    return EpochPlan(train_ids.numel(), batch_size, seed)
