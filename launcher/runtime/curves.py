"""`CurvesWriter`: a job's per-epoch records as `history.csv` and TensorBoard event files.

Each node's first rank writes them into the job's directory (`contract.jobs.directory`): the CSV
rewritten whole at every epoch's end (one row per epoch, `contract.jobs.history.history_csv`),
the events through `torch.utils.tensorboard` under `tensorboard/`, one scalar per figure with the
epoch as its step: `train/loss`, `train/accuracy`, `train/batches_per_second`,
`train/epoch_seconds` and `eval/<figure>` (`eval/val_accuracy`, `eval/test_hits@50`, ...). A rank
resumed from a checkpoint purges the events of the epochs it trains again (`purge_step`), so
TensorBoard shows each epoch once. `tensorboard --logdir <job directory>/tensorboard` opens them.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from graphtier.contract.jobs.directory import history_csv_path, tensorboard_dir
from graphtier.contract.jobs.history import TRAINING_COLUMNS, EpochRecord, history_csv

TRAINING_TAGS = {name: f"train/{name.removeprefix('train_')}" for name in TRAINING_COLUMNS[2:]}


def scalar_tags(record: EpochRecord) -> dict[str, float]:
    """The TensorBoard scalars of one epoch's record, by tag (figures it lacks left out)."""
    tags = {tag: getattr(record, name) for name, tag in TRAINING_TAGS.items() if getattr(record, name) is not None}
    tags.update({f"eval/{name}": value for name, value in record.metrics.items()})
    return {tag: float(value) for tag, value in tags.items() if math.isfinite(value)}


class CurvesWriter:
    """Writes the records of one job into its directory; `resumed_at` is the first epoch this process
    trains (the events of it and later epochs that an earlier attempt wrote are purged)."""

    def __init__(self, job_dir: Path, resumed_at: int = 0) -> None:
        self.job_dir = Path(job_dir)
        self.resumed_at = resumed_at
        self._writer: Any = None
        self._unavailable = False
        self._written: set[tuple[str, int]] = set()

    def write(self, records: list[EpochRecord]) -> None:
        """Rewrite history.csv from `records`; add the scalars of theirs not written yet."""
        path = history_csv_path(self.job_dir)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(history_csv(records))
        os.replace(partial, path)
        writer = self._tensorboard()
        if writer is None:
            return
        for record in records:
            if record.epoch < self.resumed_at:
                continue  # an earlier attempt's events hold them
            for tag, value in scalar_tags(record).items():
                if (tag, record.epoch) not in self._written:
                    writer.add_scalar(tag, value, record.epoch)
                    self._written.add((tag, record.epoch))
        writer.flush()

    def _tensorboard(self) -> Any:
        if self._writer is None and not self._unavailable:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                self._unavailable = True
                print(f"no TensorBoard events for this job: {exc} (pip install tensorboard)", flush=True)
                return None
            purge = self.resumed_at if self.resumed_at > 0 else None
            self._writer = SummaryWriter(str(tensorboard_dir(self.job_dir)), purge_step=purge)
        return self._writer

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
