"""`ProgressReporter`: a rank's `TrainProgress` events -> the daemon's ProgressReport, and log lines.

Reports carry cumulative counters and the latest figures (loss, accuracy, batches/s, data
waiting time, val/test accuracy, the evaluation at the best validation epoch so far), so the
status page, the metrics and `job status` follow a rank whichever loop -- built-in or the user's --
produced the events. A daemon that cannot be reached is said once; training goes on (the daemon
decides the job's fate).
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from graphtier.contract.errors import DaemonError
from graphtier.contract.jobs.progress import Phase, ProgressReport, TrainerFigures
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.channel_loader import ChannelLoader
from graphtier.launcher.runtime.train_config import TrainProgress

_PHASES = {"step": Phase.TRAIN, "epoch": Phase.TRAIN, "eval": Phase.EVAL, "done": Phase.DONE}


def describe_event(event: TrainProgress, loss: float) -> str:
    """One log line for an 'epoch', 'eval' or 'done' event, e.g. `epoch 2 evaluated: step 30 loss 0.4123
    accuracy val 0.8100, test 0.8020` or `done: epoch 2 step 30 ...`."""
    accuracy = ", ".join(f"{k} {v:.4f}" for k, v in event.eval_accuracy.items())
    head = "done: epoch" if event.kind == "done" else "epoch"
    what = {"epoch": " trained:", "eval": " evaluated:", "done": ""}[event.kind]
    rate = f" {event.batches_per_second:.2f} batches/s" if event.kind == "epoch" and event.batches_per_second else ""
    return f"{head} {event.epoch}{what} step {event.step} loss {loss:.4f}{rate}" + (
        f" accuracy {accuracy}" if accuracy else ""
    )


class ProgressReporter:
    """`TrainProgress` events -> trainer ProgressReports (cumulative counters, latest figures)."""

    def __init__(self, client: DaemonClient, job_id: str, rank: int, loader: ChannelLoader) -> None:
        self.client, self.job_id, self.rank, self.loader = client, job_id, rank, loader
        self.figures = TrainerFigures()
        self._warned = False

    def __call__(self, event: TrainProgress) -> None:
        f = self.figures
        val = event.eval_accuracy.get("val", f.val_accuracy)
        test = event.eval_accuracy.get("test", f.test_accuracy)
        metrics = {k: v for k, v in event.eval_accuracy.items() if k not in ("val", "test")} or f.eval_metrics
        self.figures = TrainerFigures(
            phase=_PHASES[event.kind],
            epoch=event.epoch,
            step_in_epoch=event.batches_in_epoch,
            global_step=event.step,
            loss=event.loss if event.loss is not None else f.loss,
            accuracy=event.accuracy if event.accuracy is not None else f.accuracy,
            batches_per_second=event.batches_per_second or f.batches_per_second,
            data_wait_seconds_total=self.loader.stats().consumer_wait_s,
            train_seconds_total=event.elapsed_s,
            steps_total=self.loader.batches_taken,
            val_accuracy=val,
            test_accuracy=test,
            model_bytes=event.model_bytes,
            eval_metrics=metrics,
            best=event.best if event.best is not None else f.best,
            last_epoch=event.record if event.record is not None else f.last_epoch,
        )
        if event.kind in ("epoch", "eval", "done"):
            print(describe_event(event, self.figures.loss), flush=True)
        report = ProgressReport(self.job_id, self.rank, os.getpid(), datetime.now(timezone.utc), self.figures)
        try:
            self.client.report_progress(report)
        except DaemonError as exc:
            if not self._warned:
                print(f"cannot report progress: {exc}", flush=True)
                self._warned = True
