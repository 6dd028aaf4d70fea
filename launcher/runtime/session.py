"""`TrainSession`: the bookkeeping every training loop shares, whoever writes the loop.

Steps and their position (epoch, batches done, global step), resuming from the newest
checkpoint, periodic and end-of-epoch checkpoints (rank 0), loss/accuracy/throughput windows,
evaluation with the best epoch tracked, and `TrainProgress` events for the reporter. The
built-in loop (`run_training`) and a user's own loop (`graphtier.launcher.loader`) both drive
one of these, so the status page, metrics and restarts behave the same for either.

The best epoch is the one whose evaluation has the highest `config.best_split` figure (the
validation accuracy, or a link job's val_hits@50), ties going to the earlier epoch: the
figures papers report. Evaluations without that figure (no validation split) pick none. It is
kept in the checkpoints, so a job resumed after a restart still reports the best of all its
epochs; an epoch's end is checkpointed after its evaluation, which the checkpoint then holds.

Every epoch closes with its record (`EpochRecord`): the epoch's training figures over all ranks (one
small all-reduce: every rank must end the epoch) and, once evaluated, its evaluation. The records are
the job's curves: reported to the daemon (`job status --json`'s history, the status page), kept in the
checkpoints (a resumed job keeps its history) and, given the job's `JobOutputs`, written by each node's
first rank as `history.csv` and TensorBoard events (`curves.py`). With `JobOutputs` that rank also keeps
a CPU copy of the weights at each new best epoch (in the checkpoints too) and, when training finishes,
writes the job's exported model from it (`exported_model.py`, format `contract.jobs.artifact`).

Throughput is one figure everywhere: optimizer steps per second of wall time over a window
(`batches_per_second`; one step = one mini-batch of one rank).

Each node's local rank 0 writes the checkpoints into its own job directory, so after a multi-node
job restarts on fewer nodes (or with a node whose part is new) the nodes may hold different newest
checkpoints, or none: on resume the ranks agree on the newest any of them holds, and the rank
holding it sends it to the others (`_agreed_checkpoint`). The position it records is rescaled when
the world size changed: the batches done in its epoch were the old ranks' shares.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.jobs.artifact import ArtifactFigures
from graphtier.contract.jobs.directory import checkpoint_step
from graphtier.contract.jobs.history import EpochRecord, figure_names
from graphtier.launcher.runtime.checkpoint import (
    TrainPosition,
    latest_checkpoint,
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)
from graphtier.launcher.runtime.curves import CurvesWriter
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import EvalBatches, Forward, evaluate_splits
from graphtier.launcher.runtime.exported_model import JobOutputs, script_model, snapshot, write_artifact
from graphtier.launcher.runtime.nonfinite import NonFiniteGuard
from graphtier.launcher.runtime.train_config import ProgressKind, TrainConfig, TrainProgress, TrainResult
from graphtier.service.pipeline.epoch_plan import dropout_seed


def _rescaled(position: TrainPosition, payload: dict[str, Any], world_size: int) -> TrainPosition:
    """`position` for `world_size` ranks: a checkpoint written by another number of ranks counted the
    batches of its epoch in their shares (each rank's batches are 1/world of the epoch's), rounded down
    so that no batch goes untrained."""
    written_by = payload.get("extra", {}).get("world_size")
    if not isinstance(written_by, int) or written_by == world_size or position.batch == 0:
        return position
    return TrainPosition(position.epoch, position.batch * written_by // world_size, position.step)


class Window:
    """Loss, accuracy and throughput accumulated between two reports."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss_sum, self.correct, self.labelled, self.batches = 0.0, 0, 0, 0
        self.started = time.perf_counter()
        self.stopped: float | None = None

    def stop(self) -> None:
        """The training it measures is over: time after this (an evaluation) is not in its rate."""
        if self.stopped is None:
            self.stopped = time.perf_counter()

    def add(self, loss: float, correct: int, labelled: int) -> None:
        self.loss_sum += loss
        self.correct += correct
        self.labelled += labelled
        self.batches += 1

    def summary(self) -> dict[str, float | None]:
        took = (self.stopped if self.stopped is not None else time.perf_counter()) - self.started
        return {
            "loss": self.loss_sum / self.batches if self.batches else None,
            "accuracy": self.correct / self.labelled if self.labelled else None,
            "batches_per_second": self.batches / took if self.batches and took > 0 else None,
        }


def model_state_bytes(module: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the parameters, their gradients and the optimizer's state tensors (one rank's model footprint)."""
    params = sum(p.numel() * p.element_size() for p in module.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in module.parameters() if p.grad is not None)
    state = sum(
        v.numel() * v.element_size()
        for s in optimizer.state.values()
        for v in s.values()
        if isinstance(v, torch.Tensor)
    )
    return params + grads + state


class TrainSession:
    """One rank's training bookkeeping for `config.epochs` epochs; see the module docstring.

    Call `resume(module, optimizer)` once (before wrapping the module in DDP), then per batch
    `record_step`, per epoch `end_epoch` (given the epoch's evaluation, run when one is due), and `finish` last.
    """

    def __init__(
        self,
        ctx: DistContext,
        config: TrainConfig,
        report: Callable[[TrainProgress], None] | None = None,
        outputs: JobOutputs | None = None,
    ) -> None:
        """`outputs`: the job's directory and what its exported model is (None: no curves files, no artifact)."""
        self.ctx, self.config, self.outputs = ctx, config, outputs
        self.report = report or (lambda _: None)
        self.started = time.perf_counter()
        self.module: nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.position = TrainPosition()
        self.resumed_from: Path | None = None
        self.step = 0
        self.last_checkpoint: Path | None = None
        self.history: list[TrainProgress] = []
        self.final_eval: dict[str, float] = {}
        self.best_eval: dict[str, float] = {}
        self.best_epoch: int | None = None
        self.evaluated_epoch = -1
        self.window, self.epoch_window = Window(), Window()
        self.guard = NonFiniteGuard(config.on_nonfinite, ctx.rank, self._where)
        self._at: tuple[int, int] | None = None  # (epoch, batch) of the step under way, for messages
        self._steps_here = 0  # steps this process took (after a resume: since it)
        self.curves: dict[int, EpochRecord] = {}  # every epoch's record, by epoch
        self._closed: set[int] = set()  # epochs whose end was recorded (end_epoch ran, or restored)
        self._pending: dict[int, dict[str, float]] = {}  # evaluations of epochs not yet ended
        self._writes = outputs is not None and ctx.local_rank == 0  # each node's first rank: curves, artifact
        self._curves_writer: CurvesWriter | None = None
        self.best_state: dict[str, torch.Tensor] | None = None  # CPU weights at best_epoch (with outputs)
        self._best_state_epoch: int | None = None

    def _where(self) -> str:
        at = f" (epoch {self._at[0]}, batch {self._at[1]})" if self._at is not None else ""
        return f"step {self.step + 1}{at}"

    def begin_step(self, epoch: int, batch: int) -> None:
        """Batch `batch` (1-based) of `epoch` is about to be trained: names the step in messages."""
        self._at = (epoch, batch)

    def check_loss_before_backward(self, loss: float) -> None:
        """With on_nonfinite fail, a non-finite loss stops the rank before backward (named as the loss,
        the cause, rather than as the gradients it makes non-finite)."""
        if self.guard.policy == "fail" and not math.isfinite(loss):
            self.guard.check_loss(loss)

    def resume(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> TrainPosition:
        """Load the newest checkpoint of `config.checkpoint_dir` into module and optimizer (if any);
        seed dropout per rank; return where training stands. Every rank must call it."""
        self.module, self.optimizer = module, optimizer
        self.guard.attach(module, optimizer)
        self.started = time.perf_counter()  # training time starts here, not with the imports and set-up before
        ckpt_dir = self.config.checkpoint_dir
        if ckpt_dir is not None:
            if self.ctx.local_rank == 0:  # one writer per node: each node's job directory has its own checkpoints
                remove_partial_writes(ckpt_dir)
            self.resumed_from, loaded = self._agreed_checkpoint(latest_checkpoint(ckpt_dir))
            if loaded is not None:
                self.position, payload = loaded
                try:
                    module.load_state_dict(payload["model"])
                    optimizer.load_state_dict(payload["optimizer"])
                except (RuntimeError, ValueError, KeyError) as exc:
                    raise GraphtierError(
                        f"{self.resumed_from}: checkpoint does not fit this model/optimizer ({exc}); "
                        "use another checkpoint_dir or delete it"
                    ) from exc
                self.position = _rescaled(self.position, payload, self.ctx.world_size)
                self._restore_best(payload)
            self.ctx.barrier()  # every rank has read the checkpoint before rank 0 may write (and prune) again
        self.step, self.last_checkpoint = self.position.step, self.resumed_from
        torch.manual_seed(dropout_seed(self.config.seed, self.ctx.rank, self.position.step))  # differs per rank
        return self.position

    def _restore_best(self, payload: dict[str, Any]) -> None:
        """The best evaluation a checkpoint recorded (see `checkpoint`), if it has one, its weights and the
        records of the epochs it covers."""
        extra = payload.get("extra", {})
        best = extra.get("best")
        if isinstance(best, dict) and isinstance(best.get("epoch"), int) and isinstance(best.get("eval"), dict):
            self.best_epoch, self.best_eval = best["epoch"], {str(k): float(v) for k, v in best["eval"].items()}
            weights = best.get("weights")
            if self._writes and isinstance(weights, dict) and best.get("weights_epoch") == self.best_epoch:
                self.best_state, self._best_state_epoch = weights, self.best_epoch
        for data in extra.get("curves") or []:
            record = EpochRecord.from_json(data)
            self.curves[record.epoch] = record
            self._closed.add(record.epoch)

    @property
    def best(self) -> BestEvaluation | None:
        """The evaluation at the best epoch so far, as the job's result reports it; None before one."""
        if self.best_epoch is None:
            return None
        return BestEvaluation.of(self.best_epoch, self.best_eval, self.config.best_split)

    def _agreed_checkpoint(
        self, newest: Path | None
    ) -> tuple[Path | None, tuple[TrainPosition, dict[str, Any]] | None]:
        """(the checkpoint every rank resumes from, its position and payload): `newest` (this node's) alone,
        or, with several ranks, the newest any rank holds, sent by the lowest rank holding it when the
        nodes' newest differ (see the module docstring). (None, None) when no rank holds one."""
        if not self.ctx.distributed:
            return newest, load_checkpoint(newest) if newest is not None else None
        mine = checkpoint_step(newest) if newest is not None else -1
        mine = -1 if mine is None else mine
        steps = torch.tensor([mine, -mine], dtype=torch.int64, device=self.ctx.device)  # NCCL reduces on the GPU
        dist.all_reduce(steps, op=dist.ReduceOp.MAX)
        highest, lowest = int(steps[0]), -int(steps[1])
        if highest < 0:
            return None, None
        if highest == lowest:  # every node holds it (one node, or the nodes checkpointed alike)
            assert newest is not None  # this node's newest is that checkpoint
            return newest, load_checkpoint(newest)
        holder = torch.tensor(
            [self.ctx.rank if mine == highest else self.ctx.world_size], dtype=torch.int64, device=self.ctx.device
        )
        dist.all_reduce(holder, op=dist.ReduceOp.MIN)
        sent: list[Any] = [
            (newest.name, load_checkpoint(newest)) if self.ctx.rank == int(holder) and newest is not None else None
        ]
        dist.broadcast_object_list(sent, src=int(holder))
        name, loaded = sent[0]
        return (newest if self.ctx.rank == int(holder) else Path(name)), loaded

    def skip(self, epoch: int) -> int:
        """How many leading batches of `epoch` the checkpoint resumed from already covers."""
        return self.position.batch if epoch == self.position.epoch else 0

    def start_epoch(self) -> None:
        self.window.reset()
        self.epoch_window.reset()

    def end_batches(self) -> None:
        """The epoch's batches are done. A script's loop may evaluate before the epoch ends (`end_epoch`):
        the epoch's batches/s stops counting here, as the built-in loop's does."""
        self.window.stop()
        self.epoch_window.stop()

    def emit(self, kind: ProgressKind, epoch: int, batches: int, **values: Any) -> None:
        event = TrainProgress(
            kind=kind,
            rank=self.ctx.rank,
            world_size=self.ctx.world_size,
            epoch=epoch,
            step=self.step,
            epochs=self.config.epochs,
            batches_in_epoch=batches,
            elapsed_s=time.perf_counter() - self.started,
            model_bytes=model_state_bytes(self.module, self.optimizer) if self.module and self.optimizer else 0,
            **values,
        )
        if kind != "step":
            self.history.append(event)
        self.report(event)

    def checkpoint(self, at: TrainPosition) -> None:
        if self.config.checkpoint_dir is not None and self.ctx.local_rank == 0 and self.module is not None:
            assert self.optimizer is not None
            self.last_checkpoint = save_checkpoint(
                self.config.checkpoint_dir,
                at,
                self.module.state_dict(),
                self.optimizer.state_dict(),
                extra={
                    "config": self.config.model_dump(mode="json"),
                    "world_size": self.ctx.world_size,
                    "best": self._best_payload(),
                    "curves": [self.curves[e].to_json() for e in sorted(self.curves)],
                },
                keep=self.config.keep_checkpoints,
            )

    def _best_payload(self) -> dict[str, Any] | None:
        if self.best_epoch is None:
            return None
        payload: dict[str, Any] = {"epoch": self.best_epoch, "eval": self.best_eval}
        if self.best_state is not None:
            payload.update(weights=self.best_state, weights_epoch=self._best_state_epoch)
        return payload

    def record_step(self, epoch: int, done: int, loss: float, correct: int, labelled: int) -> None:
        """One optimizer step: batch `done` (1-based) of `epoch`; reports and checkpoints when due.
        A NaN or infinite loss (or gradient, checked before the optimizer step) is handled as the job's
        `on_nonfinite` says (`nonfinite`): by default it fails the rank, and so the job, naming the rank
        and step -- a diverged model or corrupt features must never end as a 'succeeded' job."""
        self._at = (epoch, done)
        counted = self.guard.check_loss(loss)
        self.step += 1
        self._steps_here += 1
        self._at = None
        if counted:
            self.window.add(loss, correct, labelled)
            self.epoch_window.add(loss, correct, labelled)
        if self.step % self.config.log_every_steps == 0:
            self.emit("step", epoch, done, **self.window.summary())
            self.window.reset()
        if self.config.checkpoint_every_steps and self.step % self.config.checkpoint_every_steps == 0:
            self.checkpoint(TrainPosition(epoch, done, self.step))

    def end_epoch(self, epoch: int, done: int, evaluate: Callable[[], object] | None = None) -> None:
        """Report the end of `epoch`, run `evaluate()` when the epoch is due for one, then checkpoint:
        the checkpoint comes after the evaluation, so a job resumed from it has that epoch's figures in
        its best (a checkpoint taken before, then a restart, lost the epoch's evaluation for good)."""
        self.epoch_window.stop()
        record = self._epoch_record(epoch)
        self.emit("epoch", epoch, done, record=record, **self.epoch_window.summary())
        every = self.config.eval_every_epochs
        if evaluate is not None and (epoch == self.config.epochs - 1 or bool(every and (epoch + 1) % every == 0)):
            evaluate()
        self._closed.add(epoch)
        self._publish()
        self.checkpoint(TrainPosition(epoch + 1, 0, self.step))

    def _epoch_record(self, epoch: int) -> EpochRecord:
        """The epoch's training figures over all ranks (every rank must call it: it all-reduces), with the
        evaluation a loop recorded before the epoch's end."""
        w = self.epoch_window
        took = (w.stopped if w.stopped is not None else time.perf_counter()) - w.started
        rate = w.batches / took if w.batches and took > 0 else 0.0
        sums = torch.tensor([w.loss_sum, w.correct, w.labelled, w.batches, rate], dtype=torch.float64)
        longest = torch.tensor([took], dtype=torch.float64)
        if self.ctx.distributed:
            sums, longest = sums.to(self.ctx.device), longest.to(self.ctx.device)  # NCCL reduces on the GPU
            dist.all_reduce(sums)
            dist.all_reduce(longest, op=dist.ReduceOp.MAX)
        loss_sum, correct, labelled, batches, rate = sums.tolist()
        record = EpochRecord(
            epoch=epoch,
            step=self.step,
            train_loss=loss_sum / batches if batches else None,
            train_accuracy=correct / labelled if labelled else None,
            batches_per_second=rate if batches else None,
            epoch_seconds=float(longest.item()),
            metrics=self._pending.pop(epoch, {}),
        )
        self.curves[epoch] = self.curves[epoch].merged(record) if epoch in self.curves else record
        return self.curves[epoch]

    def _publish(self) -> None:
        """history.csv and the TensorBoard events from the records of the ended epochs (the writing rank)."""
        if not self._writes:
            return
        assert self.outputs is not None
        if self._curves_writer is None:
            self._curves_writer = CurvesWriter(self.outputs.directory, resumed_at=self.position.epoch)
        self._curves_writer.write([self.curves[e] for e in sorted(self.curves) if e in self._closed])

    def evaluate(
        self,
        epoch: int,
        batches: int,
        eval_batches: EvalBatches,
        model: nn.Module | None = None,
        forward: Forward | None = None,
        splits: tuple[str, ...] | None = None,
    ) -> dict[str, float]:
        """Accuracy of every split (default `config.eval_splits`) over all ranks; every rank must call it."""
        model = model if model is not None else self.module
        assert model is not None, "resume() first, or pass the model"
        splits = splits if splits is not None else self.config.eval_splits
        return self.record_evaluation(
            epoch, batches, evaluate_splits(model, eval_batches, splits, self.ctx, forward=forward)
        )

    def record_evaluation(self, epoch: int, batches: int, results: dict[str, float]) -> dict[str, float]:
        """Keep and report an evaluation's figures (accuracy by split, or a link job's metrics by name);
        the best so far is the one with the highest `config.best_split` figure, the earlier on a tie."""
        self.final_eval = results
        self.evaluated_epoch = epoch
        score = self.final_eval.get(self.config.best_split)
        best_so_far = self.best_eval.get(self.config.best_split, -math.inf)
        if score is not None and (self.best_epoch is None or score > best_so_far):
            self.best_eval, self.best_epoch = dict(self.final_eval), epoch
            if self._writes and self.module is not None:  # the weights the job will export, unless a later epoch wins
                self.best_state, self._best_state_epoch = snapshot(self.module), epoch
        figures = figure_names(results)
        record = None
        if epoch in self.curves:
            record = self.curves[epoch] = replace(self.curves[epoch], metrics={**self.curves[epoch].metrics, **figures})
        else:  # a loop that evaluates inside the epoch: the epoch's record takes it at its end
            self._pending[epoch] = {**self._pending.get(epoch, {}), **figures}
        self.emit("eval", epoch, batches, eval_accuracy=dict(self.final_eval), best=self.best, record=record)
        if epoch in self._closed:  # evaluated after its end (a script's loop, a resumed last epoch)
            self._publish()
        return self.final_eval

    def finish(self, epochs_completed: int | None = None) -> TrainResult:
        """Report 'done' with the latest evaluation and return how training went."""
        self.guard.finish(self._steps_here)
        epochs = self.config.epochs if epochs_completed is None else epochs_completed
        self._export(epochs)
        if self._curves_writer is not None:
            self._curves_writer.close()
        self.emit("done", max(epochs - 1, 0), 0, eval_accuracy=dict(self.final_eval), best=self.best)
        return TrainResult(
            model=self.module,  # type: ignore[arg-type]  # None only for a loop that never resumed
            steps=self.step,
            epochs_completed=epochs,
            resumed_from=self.resumed_from,
            resumed_position=self.position if self.resumed_from is not None else None,
            final_eval=self.final_eval,
            best_eval=self.best_eval,
            best_epoch=self.best_epoch,
            history=self.history,
            last_checkpoint=self.last_checkpoint,
        )

    def _export(self, epochs: int) -> None:
        """Write the job's exported model (the writing rank, with outputs): the best epoch's weights, or the
        last epoch's when no evaluation had the `best_split` figure."""
        if not self._writes or self.module is None:
            return
        assert self.outputs is not None
        last = max(epochs - 1, 0)
        weights, weights_epoch = self.best_state, self._best_state_epoch
        if weights is None or weights_epoch != self.best_epoch:
            weights, weights_epoch = snapshot(self.module), last
        figures = ArtifactFigures(
            weights_epoch=weights_epoch if weights_epoch is not None else last,
            best_epoch=self.best_epoch,
            selected_by=BestEvaluation.of(0, {}, self.config.best_split).selected_by,
            best=figure_names(self.best_eval),
            final=figure_names(self.final_eval),
            epochs=epochs,
            steps=self.step,
        )
        write_artifact(self.outputs, weights, self.outputs.model or script_model(self.module), figures)
