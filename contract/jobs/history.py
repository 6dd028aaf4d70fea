"""A job's curves: one `EpochRecord` per epoch, and the CSV they are written as (`history.csv`).

Every rank's session closes an epoch with the job-wide figures of its training (summed over the
ranks: the loss and accuracy over every rank's batches, the batches per second of all ranks
together, the slowest rank's epoch time) and, once the epoch is evaluated, its evaluation. The
same record is what `job status --json` lists under `history` (the daemon keeps it in its job
table), what the status page charts, what the job's TensorBoard events hold and what each row of
`history.csv` says, so the four never disagree.

Evaluation figures are named as the job's result names them: `val_accuracy` and `test_accuracy`
for node classification, `val_auc`, `test_hits@50`, ... for link prediction.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field, replace
from typing import Any

from graphtier.contract.evaluation import NODE_SPLIT_FIGURES

TRAINING_COLUMNS = ("epoch", "step", "train_loss", "train_accuracy", "batches_per_second", "epoch_seconds")


def figure_names(evaluation: dict[str, float]) -> dict[str, float]:
    """An evaluation as a trainer computes it (accuracy by split "val"/"test", or a link job's metrics
    by name) with the names the result uses (val_accuracy, test_accuracy, val_auc, ...)."""
    return {NODE_SPLIT_FIGURES.get(name, name): float(value) for name, value in evaluation.items()}


@dataclass(frozen=True)
class EpochRecord:
    """One epoch of a job: its training figures over all ranks and, once evaluated, its evaluation.

    `epoch` counts from 0; `step` is the global optimizer step at the epoch's end. A figure is None
    when the epoch had nothing to measure it on (no labelled seed: no accuracy)."""

    epoch: int
    step: int = 0
    train_loss: float | None = None
    train_accuracy: float | None = None
    batches_per_second: float | None = None  # all ranks together over the epoch's training time
    epoch_seconds: float | None = None  # the slowest rank's training time of the epoch (its evaluation not counted)
    metrics: dict[str, float] = field(default_factory=dict)  # the epoch's evaluation; empty when not evaluated

    def merged(self, newer: EpochRecord) -> EpochRecord:
        """This epoch's record updated by `newer`'s figures: its training figures where it has them, the
        evaluations of both (newer's winning)."""
        training = {name: getattr(newer, name) for name in TRAINING_COLUMNS[1:] if getattr(newer, name) is not None}
        return replace(self, **training, metrics={**self.metrics, **newer.metrics})

    def to_json(self) -> dict[str, object]:
        return {
            "epoch": self.epoch,
            "step": self.step,
            "train_loss": self.train_loss,
            "train_accuracy": self.train_accuracy,
            "batches_per_second": self.batches_per_second,
            "epoch_seconds": self.epoch_seconds,
            "metrics": dict(self.metrics),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EpochRecord:
        def number(name: str) -> float | None:
            value = data.get(name)
            return None if value is None else float(value)

        return cls(
            epoch=int(data["epoch"]),
            step=int(data.get("step") or 0),
            train_loss=number("train_loss"),
            train_accuracy=number("train_accuracy"),
            batches_per_second=number("batches_per_second"),
            epoch_seconds=number("epoch_seconds"),
            metrics={str(k): float(v) for k, v in dict(data.get("metrics") or {}).items()},
        )


def metric_columns(records: list[EpochRecord]) -> list[str]:
    """The evaluation figures any record has, validation before test, then by name."""
    names = {name for record in records for name in record.metrics}
    return sorted(names, key=lambda name: (not name.startswith("val"), name))


def history_csv(records: list[EpochRecord]) -> str:
    """`history.csv`: a header, then one row per epoch in order; an empty cell where a figure is missing."""
    metrics = metric_columns(records)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*TRAINING_COLUMNS, *metrics])

    def cell(value: float | int | None) -> str:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return ""
        return repr(value) if isinstance(value, float) else str(value)

    for record in sorted(records, key=lambda r: r.epoch):
        training = [getattr(record, name) for name in TRAINING_COLUMNS]
        writer.writerow([cell(v) for v in training] + [cell(record.metrics.get(name)) for name in metrics])
    return out.getvalue()
