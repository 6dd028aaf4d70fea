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
from collections.abc import Callable, Iterable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.batch import Batch, on_device
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import EvalBatches, Forward
from graphtier.launcher.runtime.models import build_model
from graphtier.launcher.runtime.models.rgcn import TypedInput, typed_param_groups
from graphtier.launcher.runtime.session import TrainSession
from graphtier.launcher.runtime.train_config import TrainConfig, TrainProgress, TrainResult


def _train_step(
    ddp: nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    device: torch.device,
    session: TrainSession,
    forward: Forward | None = None,
) -> tuple[float, int, int]:
    """One optimizer step on `batch`; returns (loss, correct seeds, labelled seeds). The session's
    non-finite guard checks the loss before backward and the gradients before the optimizer step.
    `forward(model, batch)` computes the logits (default `model(blocks, x)`)."""
    batch = on_device(batch, device)
    y = batch.y
    logits = forward(ddp, batch) if forward is not None else ddp(batch.blocks, batch.x)
    if logits.shape[0] != y.shape[0]:
        raise GraphtierError(f"the model returned {logits.shape[0]} rows for a batch of {y.shape[0]} seeds")
    labelled = y >= 0
    count = int(labelled.sum())
    loss = F.cross_entropy(logits, y, ignore_index=-1, reduction="sum") / max(count, 1)
    value = float(loss.detach())
    session.check_loss_before_backward(value)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct = int((logits.detach().argmax(dim=1) == y)[labelled].sum())
    return value, correct, count


def run_training(
    batches_for_epoch: Callable[[int], Iterable[Batch]],
    eval_batches: EvalBatches | None,
    config: TrainConfig,
    progress_cb: Callable[[TrainProgress], None] | None = None,
    *,
    model: nn.Module | None = None,
    forward: Forward | None = None,
) -> TrainResult:
    """Train `config.epochs` epochs on this rank's batches; see the module docstring.

    `batches_for_epoch(e)` yields this rank's batches of epoch e, the same sequence every time
    it is called for e (resuming skips the batches a checkpoint already covers, releasing
    them). `eval_batches(split)` yields this rank's batches of a split; None skips evaluation.
    `model`, when given, replaces the built-in `config.model` (same forward signature);
    `forward(model, batch)` computes a batch's logits when the model is not called `(blocks, x)` (a
    typed model: `typed_forward`). A typed model's learned embeddings learn at a tenth of the rate,
    and DDP allows parameters a batch leaves unused (relations or types it does not sample).
    """
    ctx = DistContext.from_env(config.device, timeout_s=config.dist_timeout_s)
    try:
        return _run(ctx, batches_for_epoch, eval_batches, config, progress_cb or (lambda _: None), model, forward)
    finally:
        ctx.shutdown()


def _run(
    ctx: DistContext,
    batches_for_epoch: Callable[[int], Iterable[Batch]],
    eval_batches: EvalBatches | None,
    config: TrainConfig,
    report: Callable[[TrainProgress], None],
    model: nn.Module | None,
    forward: Forward | None,
) -> TrainResult:
    torch.manual_seed(config.seed)  # identical initial parameters on every rank
    module = (
        model
        if model is not None
        else build_model(
            config.model, config.in_dim, config.hidden, config.num_classes, config.layers, config.dropout, config.heads
        )
    )
    module.to(ctx.device)
    typed = any(isinstance(m, TypedInput) for m in module.modules())
    optimizer = torch.optim.Adam(typed_param_groups(module, config.lr), lr=config.lr, weight_decay=config.weight_decay)
    session = TrainSession(ctx, config, report)
    position = session.resume(module, optimizer)
    if session.resumed_from is not None and ctx.rank == 0:
        print(
            f"resumed from {session.resumed_from.name}: epoch {position.epoch}, {position.batch} batches into it, "
            f"step {position.step}, {ctx.world_size} rank(s)",
            flush=True,
        )

    ddp: nn.Module = module
    if ctx.distributed:
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        ddp = DistributedDataParallel(module, device_ids=device_ids, find_unused_parameters=typed)
    for epoch in range(position.epoch, config.epochs):
        skip = session.skip(epoch)
        session.start_epoch()
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
                session.begin_step(epoch, index + 1)
                try:
                    loss, correct, labelled = _train_step(ddp, optimizer, batch, ctx.device, session, forward)
                finally:
                    batch.release()
                done = index + 1
                session.record_step(epoch, done, loss, correct, labelled)
        evaluate = None
        if eval_batches is not None:
            evaluate = partial(session.evaluate, epoch, done, eval_batches, forward=forward)
        session.end_epoch(epoch, done, evaluate)

    if eval_batches is not None and session.evaluated_epoch != config.epochs - 1:
        # Resumed from the last epoch's checkpoint: this process has not evaluated the model it reports.
        session.evaluate(config.epochs - 1, 0, eval_batches, forward=forward)
    result = session.finish()
    # Every rank is done with the group before any rank destroys it: a gloo group torn down while a
    # peer still has work in it aborted a rank now and then ('terminate called without an active exception').
    ctx.barrier()
    return result
