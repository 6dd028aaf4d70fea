"""Device-tier hit ratio per hotness score at a budget, against the oracle placement.

The oracle places by the access counts observed in the very epochs being scored, so no
static placement can beat it; `ratio_to_oracle` is how close a score gets. Device tiers
are accounted, not real, when no GPU is present: the figures are exact either way, since
a row's tier follows from its id alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from pydantic import BaseModel, Field

from graphtier.contract.errors import PlacementError
from graphtier.contract.storage import MAX_WINDOW
from graphtier.service.hotness import ScoreSpec, compute_scores
from graphtier.service.placement import parse_budget
from graphtier.service.prepared.dataset import PreparedDataset
from graphtier.service.storage.dio_alignment import direct_io_alignment
from graphtier.service.tiering.replay import AccessReplay, ReplayCoverage, replay_access_counts
from graphtier.service.tiering.storage_outlook import (
    StorageOutlook,
    WindowReplay,
    direct_request_bytes,
    window_depths,
)

DEFAULT_ROW_BYTES = 512  # 128 float32: assumed for datasets without features
COMPARED_SCORES = ("wrpr", "rpr", "degree")


class ScoreOutcome(BaseModel):
    """How one placement would have served the replayed epochs."""

    score: str
    hit_ratio: float = Field(description="device-tier reads / all reads at the budget")
    ratio_to_oracle: float
    host_to_device_bytes_per_epoch: float = Field(description="bytes read from below the device tiers, per epoch")
    cumulative_share: list[float] = Field(default_factory=list, exclude=True)


class TieringReport(BaseModel):
    dataset: str
    num_nodes: int
    budget: str
    budget_rows: int
    budget_bytes: int
    row_bytes: int
    row_bytes_assumed: bool
    fanouts: list[int]
    batch_size: int
    epochs: int
    batches: int
    reads_per_epoch: float
    coverage: ReplayCoverage = Field(description="how much the replay covered and whether its figures are reliable")
    outcomes: list[ScoreOutcome]
    device_tiers_simulated: bool = True
    storage: StorageOutlook | None = Field(
        None, description="the storage tier at --host-budget, with the window's effect"
    )
    png: str | None = None

    def outcome(self, score: str) -> ScoreOutcome:
        return next(o for o in self.outcomes if o.score == score)


def placement_scores(dataset: PreparedDataset, fanouts: Sequence[int]) -> dict[str, torch.Tensor]:
    """Every score to compare, in the dataset's (reordered) id space."""
    graph = dataset.graph
    train = dataset.split("train")
    first_fanout = fanouts[0] if fanouts[0] > 0 else None
    specs = {kind: ScoreSpec(kind=kind) for kind in COMPARED_SCORES}
    if first_fanout:
        specs[f"wrpr k={first_fanout}"] = ScoreSpec(kind="wrpr", fanout=first_fanout)
    scores: dict[str, torch.Tensor] = {}
    for name, spec in specs.items():
        if spec.kind == "wrpr" and train.numel() == 0:
            continue
        scores[name] = compute_scores(graph, spec, train_ids=train)
    scores["source order"] = -dataset.new_to_old.to(torch.float64)
    if dataset.manifest.score.get("kind") == "user":
        scores[f"as prepared ({dataset.manifest.score['label']})"] = -torch.arange(graph.num_nodes, dtype=torch.float64)
    return scores


def cumulative_share(counts: torch.Tensor, order: torch.Tensor, points: int = 512) -> list[float]:
    """Share of all reads served by the first k nodes of `order`, at `points` evenly spaced k."""
    cum = torch.cumsum(counts[order].to(torch.float64), 0)
    total = float(cum[-1]) if cum.numel() else 0.0
    idx = torch.linspace(0, counts.numel() - 1, points).round().long()
    return (cum[idx] / max(total, 1.0)).tolist()


def build_tiering_report(
    dataset: PreparedDataset,
    *,
    budget: str,
    fanouts: Sequence[int] = (15, 10, 5),
    batch_size: int = 1024,
    epochs: int | None = None,
    seed: int = 0,
    row_bytes: int | None = None,
    on_batch: Callable[[int, int | None], None] | None = None,
    replay: AccessReplay | None = None,
    host_budget: str | None = None,
    window: int = 4,
) -> TieringReport:
    """Replay epochs once (`epochs` of them, or None: until the hit ratios settle, the rule of
    `graphtier.service.tiering.replay`), then score every placement against the same reads. With
    `host_budget` (host-tier feature bytes after the device tier: a share or a size), also the
    storage tier's expected reads, and those with look-ahead windows up to `window` batches deep
    (the replay is then always run here: it must see every batch)."""
    n = dataset.manifest.num_nodes
    assumed = False
    if row_bytes is None:
        row_bytes = dataset.manifest.feature_row_bytes
        if row_bytes == 0:
            row_bytes, assumed = DEFAULT_ROW_BYTES, True
    if row_bytes < 1:
        raise PlacementError(f"row bytes must be >= 1, got {row_bytes}")
    data_bytes = n * row_bytes
    budget_bytes = parse_budget(budget, total_bytes=data_bytes, what="--budget")
    if budget_bytes > data_bytes:
        raise PlacementError(
            f"--budget {budget} is {budget_bytes:,} bytes, larger than the {data_bytes:,} feature bytes of "
            f"{dataset.name!r}; give at most 100% or {data_bytes:,} bytes"
        )
    budget_rows = min(n, budget_bytes // row_bytes)
    storage = None
    if host_budget is not None:
        storage = _window_replay(
            dataset, host_budget, window, device_rows=budget_rows, row_bytes=row_bytes, assumed=assumed
        )
        replay = None
    scores = placement_scores(dataset, fanouts)
    orders = {name: torch.sort(score, descending=True, stable=True).indices for name, score in scores.items()}
    if replay is None:
        replay = replay_access_counts(
            dataset.graph,
            dataset.split("train"),
            fanouts=fanouts,
            batch_size=batch_size,
            epochs=epochs,
            seed=seed,
            estimate=lambda counts: _settling_figures(counts, orders, budget_rows),
            on_batch=on_batch,
            observe=storage.observe if storage else None,
        )
    counts = replay.counts
    total = max(replay.total, 1)
    oracle_order = torch.sort(counts, descending=True, stable=True).indices
    oracle_hits = int(counts[oracle_order[:budget_rows]].sum())
    outcomes = []
    for name, order in {**orders, "oracle": oracle_order}.items():
        hits = int(counts[order[:budget_rows]].sum())
        outcomes.append(
            ScoreOutcome(
                score=name,
                hit_ratio=hits / total,
                ratio_to_oracle=hits / oracle_hits if oracle_hits else 1.0,
                host_to_device_bytes_per_epoch=(replay.total - hits) * row_bytes / replay.epochs,
                cumulative_share=cumulative_share(counts, order),
            )
        )
    rows_read = int((counts > 0).sum())
    return TieringReport(
        dataset=dataset.name,
        num_nodes=n,
        budget=str(budget),
        budget_rows=budget_rows,
        budget_bytes=budget_bytes,
        row_bytes=row_bytes,
        row_bytes_assumed=assumed,
        fanouts=list(fanouts),
        batch_size=batch_size,
        epochs=replay.epochs,
        batches=replay.batches,
        reads_per_epoch=replay.total / replay.epochs,
        coverage=replay.coverage(rows_read=rows_read, budget_holds_them=rows_read <= budget_rows),
        outcomes=outcomes,
        storage=storage.outlook(host_budget=str(host_budget), epochs=replay.epochs, num_nodes=n) if storage else None,
    )


def _settling_figures(counts: torch.Tensor, orders: dict[str, torch.Tensor], budget_rows: int) -> torch.Tensor:
    """The replay's estimate, float64 [len(orders) + 2]: each placement's device-tier hit ratio on
    `counts`, the oracle's, and how full the rows read so far would fill the budget (at most 1)."""
    total = max(int(counts.sum()), 1)
    hits = [int(counts[order[:budget_rows]].sum()) for order in orders.values()]
    hits.append(int(torch.sort(counts, descending=True).values[:budget_rows].sum()))
    fill = min(int((counts > 0).sum()) / budget_rows, 1.0) if budget_rows else 1.0
    return torch.tensor([h / total for h in hits] + [fill], dtype=torch.float64)


def _window_replay(
    dataset: PreparedDataset, host_budget: str, window: int, *, device_rows: int, row_bytes: int, assumed: bool
) -> WindowReplay:
    """The storage counter for `host_budget` after `device_rows` device rows, in the dataset's order."""
    from graphtier.service.prepared.npy_io import npy_data_offset

    if isinstance(window, bool) or not 0 <= window <= MAX_WINDOW:
        raise PlacementError(f"--window {window}: expected 0 to {MAX_WINDOW} batches")
    n = dataset.manifest.num_nodes
    left = (n - device_rows) * row_bytes
    host_bytes = parse_budget(host_budget, total_bytes=n * row_bytes, what="--host-budget")
    if host_bytes > left:
        raise PlacementError(
            f"--host-budget {host_budget} is {host_bytes:,} bytes, more than the {left:,} feature bytes left after "
            f"the device tier; give at most {left:,} bytes"
        )
    storage_from = device_rows + host_bytes // row_bytes
    request_bytes = None
    if not assumed and dataset.manifest.feature_row_bytes == row_bytes:  # the file's own rows: its requests
        path = dataset.array_path("features")
        request_bytes = direct_request_bytes(
            data_offset=npy_data_offset(path),
            row_bytes=row_bytes,
            storage_from=storage_from,
            block=direct_io_alignment(path).block,
        )
    return WindowReplay(
        num_nodes=n,
        storage_from=storage_from,
        depths=window_depths(window),
        row_bytes=row_bytes,
        request_bytes=request_bytes,
    )
