"""`python -m graphtier.launcher.runtime.rank_main --job-id ID --runtime-dir DIR`: one torchrun rank.

The daemon's job manager launches this under torchrun. The rank reads its job's spec from
the daemon, opens its producer channel (zero-copy batches), attaches the dataset's shared
tiers for evaluation, trains with `run_training` (DDP over gloo on CPU), and reports
progress -- loss, accuracy, batches/s, waiting time -- through ReportProgress; the final
report of rank 0 carries the validation and test accuracy. Lines it prints start with
`[rank N]` so the daemon can attribute them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.loader import ChannelLoader, env_rank
from graphtier.launcher.runtime.local_batches import LocalBatchSource
from graphtier.launcher.runtime.train_config import TrainConfig, TrainProgress
from graphtier.launcher.runtime.train_loop import run_training
from graphtier.service.daemon.errors import DaemonError
from graphtier.service.daemon.progress import Phase, ProgressReport, TrainerFigures
from graphtier.service.errors import GraphtierError
from graphtier.service.store import attach_dataset

_PHASES = {"step": Phase.TRAIN, "epoch": Phase.TRAIN, "eval": Phase.EVAL, "done": Phase.DONE}


def say(rank: int, message: str) -> None:
    print(f"[rank {rank}] {message}", flush=True)


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
        self.figures = TrainerFigures(
            phase=_PHASES[event.kind], epoch=event.epoch, step_in_epoch=event.batches_in_epoch, global_step=event.step,
            loss=event.loss if event.loss is not None else f.loss,
            accuracy=event.accuracy if event.accuracy is not None else f.accuracy,
            batches_per_second=event.batches_per_second or f.batches_per_second,
            data_wait_seconds_total=self.loader.stats().consumer_wait_s, train_seconds_total=event.elapsed_s,
            steps_total=self.loader.batches_taken, val_accuracy=val, test_accuracy=test, model_bytes=event.model_bytes,
        )  # fmt: skip
        if event.kind in ("epoch", "eval", "done"):
            accuracy = ", ".join(f"{k} {v:.4f}" for k, v in event.eval_accuracy.items())
            say(self.rank, f"{event.kind} epoch {event.epoch} step {event.step} loss {self.figures.loss:.4f}"
                + (f" accuracy {accuracy}" if accuracy else ""))  # fmt: skip
        report = ProgressReport(self.job_id, self.rank, os.getpid(), datetime.now(timezone.utc), self.figures)
        try:
            self.client.report_progress(report)
        except DaemonError as exc:  # the daemon decides the job's fate; training goes on
            if not self._warned:
                say(self.rank, f"cannot report progress: {exc}")
                self._warned = True


def train(job_id: str, runtime_dir: Path) -> int:
    rank = env_rank()
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    with DaemonClient(runtime_dir=runtime_dir) as client:
        spec = client.get_job(job_id).spec
        with ChannelLoader.open(client, job_id, rank) as loader:
            grant = loader.grant
            say(rank, f"job {job_id}: channel {grant.layout.channel} (producer pid {grant.layout.producer_pid}), "
                      f"{loader.steps_per_epoch} steps/epoch x {loader.epochs} epochs")  # fmt: skip
            attached = attach_dataset(client.dataset_layout(spec.dataset).handle)
            evaluation = LocalBatchSource(attached, spec.fanouts, spec.batch_size, rank, world_size, spec.seed)
            config = TrainConfig(
                model=spec.model, in_dim=grant.feature_dim, num_classes=grant.num_classes, hidden=spec.hidden,
                layers=len(spec.fanouts), heads=spec.heads, dropout=spec.dropout, lr=spec.lr, epochs=spec.epochs,
                weight_decay=spec.weight_decay, device=spec.device,
                seed=spec.seed, checkpoint_dir=runtime_dir / "jobs" / job_id / "checkpoints",
                checkpoint_every_steps=spec.checkpoint_every_steps,
                log_every_steps=max(1, min(10, loader.steps_per_epoch // 10)),
            )  # fmt: skip
            started = time.perf_counter()
            result = run_training(loader.batches_for_epoch, evaluation.eval_batches, config,
                                  ProgressReporter(client, job_id, rank, loader))  # fmt: skip
            say(rank, f"finished {result.steps} steps in {time.perf_counter() - started:.1f} s; "
                      f"final {result.final_eval}")  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graphtier.launcher.runtime.rank_main", description=__doc__.split("\n")[0])
    parser.add_argument("--job-id", required=True, help="id of the job (from SubmitJob)")
    parser.add_argument("--runtime-dir", required=True, type=Path, help="the daemon's runtime directory")
    args = parser.parse_args(argv)
    try:
        return train(args.job_id, args.runtime_dir)
    except GraphtierError as exc:
        say(env_rank(), f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
