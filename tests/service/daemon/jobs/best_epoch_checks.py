"""Checks of a finished job's result at its best validation epoch against the evaluations its log printed,
shared by the tests that run real jobs."""

from __future__ import annotations

import re
from pathlib import Path

from graphtier.contract.jobs.view import JobInfo
from graphtier.launcher.cli.job import describe

EVALUATED = re.compile(r"^\[rank 0\] epoch (\d+) evaluated: step \d+ loss \S+ accuracy (.+)$", re.MULTILINE)


def logged_evaluations(log: str) -> dict[int, dict[str, float]]:
    """Rank 0's evaluation of each epoch as its log line printed it (figures to 4 decimals), by epoch."""
    found: dict[int, dict[str, float]] = {}
    for epoch, figures in EVALUATED.findall(log):
        found[int(epoch)] = {name: float(value) for name, value in (f.rsplit(" ", 1) for f in figures.split(", "))}
    return found


def check_best_epoch(final: JobInfo) -> None:
    """The result's best epoch is one the job evaluated, its validation figure the highest the log printed
    (at least the last epoch's), its figures that epoch's logged ones, and `job status` shows them."""
    result, epochs = final.result, final.spec.epochs
    assert result is not None and result.best is not None, result
    best = result.best
    logged = logged_evaluations(Path(final.log_path).read_text())
    assert sorted(logged) == list(range(epochs)) and 0 <= best.epoch < epochs, (best, logged)
    if final.spec.task == "link":
        assert best.selected_by == "val_hits@50" and best.metrics["val_hits@50"] >= result.metrics["val_hits@50"]
        figures = best.metrics
        val = figures["val_hits@50"]
    else:
        assert best.selected_by == "val_accuracy" and best.val_accuracy >= result.val_accuracy
        figures = {"val": best.val_accuracy, "test": best.test_accuracy}
        val = best.val_accuracy
    assert {name: round(value, 4) for name, value in figures.items()} == logged[best.epoch]
    key = "val_hits@50" if final.spec.task == "link" else "val"
    assert all(round(val, 4) >= e[key] for e in logged.values())
    assert f"(epoch {best.epoch + 1}/{epochs})" in describe(final)  # `graphtier job status`
