"""How long the tiering replay runs: asked epochs, or whole epochs until its figures settle, capped;
and what its coverage says about the figures measured on it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from graphtier.service.tiering import build_tiering_report, replay
from graphtier.service.tiering.replay import (
    AUTO_MAX_BATCHES,
    AUTO_MAX_READS,
    MIN_RELIABLE_BATCHES,
    SETTLED_WITHIN,
    replay_access_counts,
)

BATCH = 64


def _replay(dataset, estimate, epochs=None):
    return replay_access_counts(
        dataset.graph, dataset.split("train"), fanouts=(5, 3), batch_size=BATCH, epochs=epochs, estimate=estimate
    )


def _rising(counts: torch.Tensor) -> torch.Tensor:
    """A figure that never settles: the reads so far, in thousands."""
    return counts.sum().to(torch.float64).reshape(1) / 1000


def test_unset_length_stops_at_the_first_epoch_past_the_minimum_once_settled(small_rmat):
    steps = math.ceil(small_rmat.split("train").numel() / BATCH)
    settled = _replay(small_rmat, lambda counts: torch.zeros(2, dtype=torch.float64))
    assert settled.stopped == "settled" and settled.drift == 0.0
    assert settled.epochs == math.ceil(MIN_RELIABLE_BATCHES / steps) and settled.batches == settled.epochs * steps
    coverage = settled.coverage()
    assert coverage.reliable and coverage.warning is None
    assert coverage.distinct_rows == int((settled.counts > 0).sum()) and coverage.reads == settled.total


@pytest.mark.parametrize(
    ("cap", "value", "stopped", "said"),
    [("AUTO_MAX_BATCHES", 40, "batch cap", "40 batches"), ("AUTO_MAX_READS", 30_000, "read cap", "30,000 row reads")],
)
def test_a_replay_that_does_not_settle_stops_at_its_cap_and_says_so(small_rmat, monkeypatch, cap, value, stopped, said):
    """The caps (lowered here) end a replay whose figures keep moving, at the first epoch end past them."""
    monkeypatch.setattr(replay, cap, value)
    steps = math.ceil(small_rmat.split("train").numel() / BATCH)
    moving = _replay(small_rmat, _rising)
    assert moving.stopped == stopped and moving.drift > SETTLED_WITHIN and moving.batches == moving.epochs * steps
    measure = (lambda r: r.batches) if stopped == "batch cap" else (lambda r: r.total)
    assert measure(_replay(small_rmat, _rising, epochs=moving.epochs - 1)) < value <= measure(moving)
    coverage = moving.coverage()
    assert not coverage.reliable and f"stopped at its cap of {said}" in coverage.warning
    assert "still moved" in coverage.warning and "give --epochs" in coverage.warning


def test_asked_epochs_are_replayed_and_judged(small_rmat):
    steps = math.ceil(small_rmat.split("train").numel() / BATCH)
    one = _replay(small_rmat, lambda counts: torch.zeros(1, dtype=torch.float64), epochs=1)
    assert (one.epochs, one.batches, one.stopped) == (1, steps, "epochs")
    assert one.coverage().reliable == (steps >= MIN_RELIABLE_BATCHES)
    untracked = _replay(small_rmat, None, epochs=1)
    assert untracked.drift is None and torch.equal(untracked.counts, one.counts)


def test_report_carries_the_coverage_of_its_replay(small_rmat):
    short = build_tiering_report(small_rmat, budget="10%", fanouts=(5, 3), batch_size=1024, epochs=1)
    assert short.batches < MIN_RELIABLE_BATCHES and not short.coverage.reliable
    assert f"only {short.batches} batch" in short.coverage.warning
    full = build_tiering_report(small_rmat, budget="10%", fanouts=(5, 3), batch_size=BATCH)
    assert full.coverage.reliable and full.coverage.stopped == "settled" and full.batches >= MIN_RELIABLE_BATCHES


def test_the_guide_states_the_rule_the_replay_follows():
    guide = " ".join((Path(__file__).parents[3] / "docs" / "guides" / "datasets.md").read_text().split())
    assert f"at least {MIN_RELIABLE_BATCHES} batches" in guide and f"fewer than {MIN_RELIABLE_BATCHES} batches" in guide
    assert SETTLED_WITHIN == 0.01 and "within one point" in guide  # a new tolerance: say it in the guide
    assert f"{AUTO_MAX_READS // 1_000_000} million row reads" in guide and f"{AUTO_MAX_BATCHES} batches" in guide
