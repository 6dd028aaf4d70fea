"""The DDP training loop a torchrun rank runs: train, checkpoint, resume, evaluate, report.

One loop for every job (`job.fit()` and the built-in models): `train` joins torchrun's process
group (gloo on CPU, NCCL on cuda) or trains alone, builds the objective's model, resumes from the
newest checkpoint in `config.checkpoint_dir` -- which is what lets `torchrun --max-restarts`
recover a killed rank -- and trains with Adam. What it optimises (node classification or link
prediction: the model, the loss of a batch, the evaluation) is the `Objective`'s
(`objectives.py`). Rank 0 of each node writes checkpoints; every rank reports progress through
`progress_cb`.

Ranks may hold different numbers of batches (`even_batches=False`, the default for batches from
anywhere): DDP's join context then shadows the collectives of ranks that finish early, so nothing
hangs. A job's producers and in-process sources give every rank the same number of steps (the
epoch plan), so a job trains with `even_batches=True`, without join's one extra collective per step.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.embedding_optimizer import EmbeddingOptimizer, embedding_settings
from graphtier.launcher.runtime.evaluation import EvalBatches, Forward
from graphtier.launcher.runtime.exported_model import JobOutputs
from graphtier.launcher.runtime.models.featureless import rank_local_state
from graphtier.launcher.runtime.objectives import NodeClassification, Objective, parameter_groups
from graphtier.launcher.runtime.session import TrainSession
from graphtier.launcher.runtime.train_config import TrainConfig, TrainProgress, TrainResult
from graphtier.service.pipeline.batch import Batch

BatchesForEpoch = Callable[[int], Iterable[Batch]]
# DDP's switch for syncing buffers before each forward: `forward_sync_buffers` since torch 2.13
# (`broadcast_buffers` is deprecated there), `broadcast_buffers` before (torch 2.11 has no other)
_SYNC_BUFFERS = (
    "forward_sync_buffers"
    if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    else "broadcast_buffers"
)


def train(
    batches_for_epoch: BatchesForEpoch,
    objective: Objective,
    config: TrainConfig,
    progress_cb: Callable[[TrainProgress], None] | None = None,
    *,
    even_batches: bool = False,
    outputs: JobOutputs | None = None,
) -> TrainResult:
    """Train `config.epochs` epochs of `objective` on this rank's batches; see the module docstring.

    `batches_for_epoch(e)` yields this rank's batches of epoch e, the same sequence every time it is
    called for e (resuming skips the batches a checkpoint already covers, releasing them).
    `even_batches`: every rank gets the same number of batches per epoch (no DDP join needed).
    `outputs`: a job's directory and model configuration, where its curves and exported model are written."""
    ctx = DistContext.from_env(config.device, timeout_s=config.dist_timeout_s)
    try:
        return _run(ctx, batches_for_epoch, objective, config, progress_cb or (lambda _: None), even_batches, outputs)
    finally:
        ctx.shutdown()


def run_training(
    batches_for_epoch: BatchesForEpoch,
    eval_batches: EvalBatches | None,
    config: TrainConfig,
    progress_cb: Callable[[TrainProgress], None] | None = None,
    *,
    model: nn.Module | None = None,
    forward: Forward | None = None,
) -> TrainResult:
    """Node classification in the one loop (`train` with `NodeClassification`): `eval_batches(split)`
    yields this rank's batches of a split (None skips evaluation); `model` replaces the built-in
    `config.model` (same forward signature); `forward(model, batch)` computes a batch's logits when
    the model is not called `(blocks, x)` (a heterogeneous model: `hetero_forward`)."""
    return train(batches_for_epoch, NodeClassification(eval_batches, model, forward), config, progress_cb)


def build_optimizers(
    module: nn.Module, config: TrainConfig, *, row_wise_embeddings: bool = True
) -> tuple[torch.optim.Adam, EmbeddingOptimizer | None]:
    """The loop's optimizers of `module`: Adam over its dense parameters and, when `row_wise_embeddings`
    and it has learned embeddings, their own row-wise optimizer (None otherwise). That one all-gathers
    at every step, so it needs every rank at every step: where ranks may end an epoch apart (DDP's
    join), the embeddings stay dense parameters of the Adam instead."""
    embeddings = EmbeddingOptimizer.for_model(module, **embedding_settings(config)) if row_wise_embeddings else None
    groups = parameter_groups(module, config.lr, config.embedding_lr)
    optimizer = torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay, fused=_fusable(groups))
    return optimizer, embeddings


def _fusable(groups: list[dict[str, Any]]) -> bool:
    """Whether Adam's fused kernel can take every parameter (floating point, on the CPU or a GPU): one
    kernel per step instead of some ten ops per parameter, which dominate small models' steps on a CPU."""
    params = [p for group in groups for p in group["params"]]
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def _wrap(module: nn.Module, objective: Objective, ctx: DistContext) -> nn.Module:
    """`module` in DDP with the objective's options when there are several ranks; itself otherwise.
    Embeddings in row mode and neighbour means stay out of DDP (`rank_local_state`)."""
    if not ctx.distributed:
        return module
    options = objective.ddp_options(module)
    ignored = [*options.ignored, *rank_local_state(module)]
    if ignored:
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, ignored)
    sync_buffers: dict[str, Any] = {} if options.sync_buffers else {_SYNC_BUFFERS: False}  # named by torch's version
    return DistributedDataParallel(
        module,
        device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
        find_unused_parameters=options.find_unused_parameters,
        **sync_buffers,
    )


def _run(
    ctx: DistContext,
    batches_for_epoch: BatchesForEpoch,
    objective: Objective,
    config: TrainConfig,
    report: Callable[[TrainProgress], None],
    even_batches: bool,
    outputs: JobOutputs | None = None,
) -> TrainResult:
    torch.manual_seed(config.seed)  # identical initial parameters (and learned embeddings) on every rank
    module = objective.build_model(config)
    module.to(ctx.device)
    may_join = ctx.distributed and not even_batches and objective.ddp_options(module).joins
    optimizer, embeddings = build_optimizers(module, config, row_wise_embeddings=not may_join)
    session = TrainSession(ctx, config, report, outputs)
    position = session.resume(module, optimizer)
    if session.resumed_from is not None and ctx.rank == 0:
        print(
            f"resumed from {session.resumed_from.name}: epoch {position.epoch}, {position.batch} batches into it, "
            f"step {position.step}, {ctx.world_size} rank(s)",
            flush=True,
        )
    ddp = _wrap(module, objective, ctx)
    joins = isinstance(ddp, DistributedDataParallel) and not even_batches and objective.ddp_options(module).joins
    for epoch in range(position.epoch, config.epochs):
        skip = session.skip(epoch)
        session.start_epoch()
        done = 0
        ddp.train()
        with ddp.join() if joins else contextlib.nullcontext():  # type: ignore[operator]  # joins implies DDP
            for index, batch in enumerate(batches_for_epoch(epoch)):
                if index < skip:  # covered by the checkpoint we resumed from
                    batch.release()
                    continue
                if config.max_steps_per_epoch is not None and index >= config.max_steps_per_epoch:
                    batch.release()
                    break
                session.begin_step(epoch, index + 1)
                try:
                    step = objective.loss(ddp, module, batch, ctx.device)
                    loss = float(step.loss.detach())
                    session.check_loss_before_backward(loss)
                    optimizer.zero_grad(set_to_none=True)
                    if embeddings is not None:
                        embeddings.zero_grad()
                    step.loss.backward()
                    optimizer.step()
                    if embeddings is not None:
                        embeddings.step(skip=session.guard.skipped_this_step)
                    if step.after_step is not None:
                        step.after_step()
                finally:
                    batch.release()
                done = index + 1
                session.record_step(epoch, done, loss, step.correct, step.counted)
        evaluate = partial(objective.evaluate, session, module, epoch, done) if objective.evaluates else None
        session.end_epoch(epoch, done, evaluate)

    if objective.evaluates and session.evaluated_epoch != config.epochs - 1:
        # Resumed from the last epoch's checkpoint: this process has not evaluated the model it reports.
        objective.evaluate(session, module, config.epochs - 1, 0)
    result = session.finish()
    # Every rank is done with the group before any rank destroys it: a gloo group torn down while a
    # peer still has work in it aborted a rank now and then ('terminate called without an active exception').
    ctx.barrier()
    return result
