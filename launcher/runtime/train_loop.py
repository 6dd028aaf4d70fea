"""The DDP training loop a torchrun rank runs: train, checkpoint, resume, evaluate, report.

`run_training` joins torchrun's process group (gloo on CPU) or trains alone, builds the
model (or takes the caller's), resumes from the newest checkpoint in `checkpoint_dir` --
which is what lets `torchrun --max-restarts` recover a killed rank -- and trains with Adam
and cross-entropy on the seed nodes. Ranks may hold different numbers of batches: DDP's
join context shadows the collectives of ranks that finish early, so nothing hangs.
Rank 0 writes checkpoints; every rank reports progress through `progress_cb`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from graphtier.launcher.runtime.batch import TrainBatch, blocks_to
from graphtier.launcher.runtime.checkpoint import (
    TrainPosition,
    latest_checkpoint,
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import EvalBatches, evaluate_splits
from graphtier.launcher.runtime.models import build_model
from graphtier.launcher.runtime.train_config import TrainConfig, TrainProgress, TrainResult
from graphtier.service.errors import GraphtierError


class _Window:
    """Loss, accuracy and throughput accumulated between two reports."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.loss_sum, self.correct, self.labelled, self.batches = 0.0, 0, 0, 0
        self.started = time.perf_counter()

    def add(self, loss: float, correct: int, labelled: int) -> None:
        self.loss_sum += loss
        self.correct += correct
        self.labelled += labelled
        self.batches += 1

    def summary(self) -> dict[str, float | None]:
        took = time.perf_counter() - self.started
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
        v.numel() * v.element_size() for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)
    )
    return params + grads + state


def _train_step(
    ddp: nn.Module, optimizer: torch.optim.Optimizer, batch: TrainBatch, device: torch.device
) -> tuple[float, int, int]:
    """One optimizer step on `batch`; returns (loss, correct seeds, labelled seeds)."""
    x = batch.x.to(device, non_blocking=True)
    y = batch.y.to(device, non_blocking=True)
    logits = ddp(blocks_to(batch.blocks, device), x)
    if logits.shape[0] != y.shape[0]:
        raise GraphtierError(f"the model returned {logits.shape[0]} rows for a batch of {y.shape[0]} seeds")
    labelled = y >= 0
    count = int(labelled.sum())
    loss = F.cross_entropy(logits, y, ignore_index=-1, reduction="sum") / max(count, 1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct = int((logits.detach().argmax(dim=1) == y)[labelled].sum())
    return float(loss.detach()), correct, count


def run_training(
    batches_for_epoch: Callable[[int], Iterable[TrainBatch]],
    eval_batches: EvalBatches | None,
    config: TrainConfig,
    progress_cb: Callable[[TrainProgress], None] | None = None,
    *,
    model: nn.Module | None = None,
) -> TrainResult:
    """Train `config.epochs` epochs on this rank's batches; see the module docstring.

    `batches_for_epoch(e)` yields this rank's batches of epoch e, the same sequence every time
    it is called for e (resuming skips the batches a checkpoint already covers, releasing
    them). `eval_batches(split)` yields this rank's batches of a split; None skips evaluation.
    `model`, when given, replaces the built-in `config.model` (same forward signature).
    """
    ctx = DistContext.from_env(config.device, timeout_s=config.dist_timeout_s)
    try:
        return _run(ctx, batches_for_epoch, eval_batches, config, progress_cb or (lambda _: None), model)
    finally:
        ctx.shutdown()


def _run(
    ctx: DistContext,
    batches_for_epoch: Callable[[int], Iterable[TrainBatch]],
    eval_batches: EvalBatches | None,
    config: TrainConfig,
    report: Callable[[TrainProgress], None],
    model: nn.Module | None,
) -> TrainResult:
    started = time.perf_counter()
    torch.manual_seed(config.seed)  # identical initial parameters on every rank
    module = model if model is not None else build_model(
        config.model, config.in_dim, config.hidden, config.num_classes, config.layers, config.dropout, config.heads
    )
    module.to(ctx.device)
    optimizer = torch.optim.Adam(module.parameters(), lr=config.lr, weight_decay=config.weight_decay)

    position, resumed_from = TrainPosition(), None
    ckpt_dir = config.checkpoint_dir
    if ckpt_dir is not None:
        if ctx.rank == 0:
            remove_partial_writes(ckpt_dir)
        resumed_from = latest_checkpoint(ckpt_dir)
        if resumed_from is not None:
            position, payload = load_checkpoint(resumed_from)
            try:
                module.load_state_dict(payload["model"])
                optimizer.load_state_dict(payload["optimizer"])
            except (RuntimeError, ValueError, KeyError) as exc:
                raise GraphtierError(
                    f"{resumed_from}: checkpoint does not fit this model/optimizer ({exc}); "
                    "use another checkpoint_dir or delete it"
                ) from exc
        ctx.barrier()  # every rank has read the checkpoint before rank 0 may write (and prune) again
    torch.manual_seed(config.seed + 7919 * (ctx.rank + 1) + position.step)  # dropout differs per rank

    ddp: nn.Module = module
    if ctx.distributed:
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        ddp = DistributedDataParallel(module, device_ids=device_ids)
    step, last_ckpt = position.step, resumed_from
    history: list[TrainProgress] = []
    final_eval: dict[str, float] = {}
    best_eval: dict[str, float] = {}
    best_epoch: int | None = None
    evaluated_epoch = -1

    def evaluate(epoch: int, batches: int) -> None:
        nonlocal final_eval, best_eval, best_epoch, evaluated_epoch
        final_eval = evaluate_splits(module, eval_batches, config.eval_splits, ctx)  # type: ignore[arg-type]
        evaluated_epoch = epoch
        score = final_eval.get(config.best_split)
        if best_epoch is None or (score is not None and score > best_eval.get(config.best_split, -1.0)):
            best_eval, best_epoch = dict(final_eval), epoch
        emit("eval", epoch, batches, eval_accuracy=dict(final_eval))

    def emit(kind: str, epoch: int, batches: int, **values) -> None:
        event = TrainProgress(
            kind=kind, rank=ctx.rank, world_size=ctx.world_size, epoch=epoch, step=step, epochs=config.epochs,  # type: ignore[arg-type]
            batches_in_epoch=batches, elapsed_s=time.perf_counter() - started,
            model_bytes=model_state_bytes(module, optimizer), **values,
        )
        if kind != "step":
            history.append(event)
        report(event)

    def checkpoint(at: TrainPosition) -> None:
        nonlocal last_ckpt
        if ckpt_dir is not None and ctx.rank == 0:
            last_ckpt = save_checkpoint(
                ckpt_dir, at, module.state_dict(), optimizer.state_dict(),
                extra={"config": config.model_dump(mode="json"), "world_size": ctx.world_size},
                keep=config.keep_checkpoints,
            )

    for epoch in range(position.epoch, config.epochs):
        skip = position.batch if epoch == position.epoch else 0
        window, epoch_window = _Window(), _Window()
        done = 0
        ddp.train()
        joined = ddp.join() if isinstance(ddp, DistributedDataParallel) else contextlib.nullcontext()
        with joined:
            for index, batch in enumerate(batches_for_epoch(epoch)):
                if index < skip:  # covered by the checkpoint we resumed from
                    batch.release()
                    continue
                if config.max_steps_per_epoch is not None and index >= config.max_steps_per_epoch:
                    batch.release()
                    break
                try:
                    loss, correct, labelled = _train_step(ddp, optimizer, batch, ctx.device)
                finally:
                    batch.release()
                step += 1
                done = index + 1
                window.add(loss, correct, labelled)
                epoch_window.add(loss, correct, labelled)
                if step % config.log_every_steps == 0:
                    emit("step", epoch, done, **window.summary())
                    window.reset()
                if config.checkpoint_every_steps and step % config.checkpoint_every_steps == 0:
                    checkpoint(TrainPosition(epoch, done, step))
        checkpoint(TrainPosition(epoch + 1, 0, step))
        emit("epoch", epoch, done, **epoch_window.summary())
        last = epoch == config.epochs - 1
        if eval_batches is not None and (last or (config.eval_every_epochs and (epoch + 1) % config.eval_every_epochs == 0)):
            evaluate(epoch, done)

    if eval_batches is not None and evaluated_epoch != config.epochs - 1:
        # Resumed after the last epoch's checkpoint but before its evaluation finished.
        evaluate(config.epochs - 1, 0)
    emit("done", config.epochs - 1, 0, eval_accuracy=dict(final_eval))
    return TrainResult(
        model=module,
        steps=step,
        epochs_completed=config.epochs,
        resumed_from=resumed_from,
        resumed_position=position if resumed_from is not None else None,
        final_eval=final_eval,
        best_eval=best_eval,
        best_epoch=best_epoch,
        history=history,
        last_checkpoint=last_ckpt,
    )
