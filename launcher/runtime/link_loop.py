"""The link-prediction loop a torchrun rank runs: the built-in loop's shape, with pairs to score.

Each batch (from the rank's producer channel) carries B train edges and their sampled
negatives as pairs over its seeds, the endpoints. The `LinkModel` embeds the seeds and scores
the pairs; the loss is binary cross-entropy (positives 1, negatives 0), the step Adam on the
model's parameters and, for a featureless graph, a sparse row update of the learned node
embeddings (`NodeEmbeddings`). Checkpoints, resume, progress and the non-finite guard are the
`TrainSession`'s, as for node classification; evaluation (`link_eval.py`) reports AUC, MRR and
Hits@K of val and test each epoch it is due, the best epoch picked by `config.best_split`.
A typed job passes its own model (`typed_link.TypedLinkModel`) and the `forward` that scores a
typed batch's pairs with it.
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
from graphtier.contract.link import PAIR_FEATURE_DECODERS
from graphtier.launcher.runtime.batch import Batch, blocks_to
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.link_model import TABLE_BUFFERS, LinkModel, NodeEmbeddings
from graphtier.launcher.runtime.models.rgcn import typed_param_groups
from graphtier.launcher.runtime.session import TrainSession
from graphtier.launcher.runtime.train_config import TrainConfig, TrainProgress, TrainResult
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.sampling.link import drop_target_edges

LinkEvaluate = Callable[[nn.Module, DistContext, "NodeEmbeddings | None"], dict[str, float]]
PairForward = Callable[[nn.Module, Batch, torch.Tensor], torch.Tensor]  # (model, batch, pairs) -> [P] logits


def build_link_model(config: TrainConfig) -> LinkModel:
    """The encoder over features (or over the learned embeddings, as wide as `hidden`) and the decoder;
    a featureless graph's `NodeEmbeddings` are its `embeddings` submodule, checkpointed with it."""
    in_dim = config.hidden if config.learned_embeddings else config.in_dim
    model = LinkModel(
        config.model,
        in_dim,
        config.hidden,
        config.layers,
        decoder=config.decoder,
        dropout=config.dropout,
        heads=config.heads,
    )
    if config.learned_embeddings:
        model.embeddings = NodeEmbeddings(config.learned_embeddings, config.hidden, lr=config.lr, seed=config.seed)
    return model


def _inputs(batch: Batch, model: LinkModel, device: torch.device) -> torch.Tensor:
    embeddings = getattr(model, "embeddings", None)
    if isinstance(embeddings, NodeEmbeddings):
        return embeddings.rows(batch.node_ids, device)
    return batch.x.to(device, non_blocking=True)


def _link_step(
    ddp: nn.Module,
    model: LinkModel,
    optimizer: torch.optim.Optimizer,
    batch: Batch,
    device: torch.device,
    session: TrainSession,
    structure: PairStructure | None,
    forward: PairForward | None = None,
) -> tuple[float, int, int]:
    """One step on a batch's pairs; returns (loss, pairs classified right at logit 0, pairs)."""
    if batch.pairs is None:
        raise GraphtierError(f"batch {batch.batch} carries no pairs: the job's producer does not sample links")
    pairs = batch.pairs.to(device, non_blocking=True)
    x = _inputs(batch, model, device) if forward is None else None
    pair_features, blocks = None, batch.blocks
    if model.reads_pair_features:
        assert structure is not None
        local = batch.pairs.cpu()
        pair_features = structure.features(batch.node_ids[local]).to(device)
        # scored as test pairs are: without the edge itself to pass messages over (see drop_target_edges)
        blocks = drop_target_edges(list(blocks), batch.pairs, batch.num_positive)
    target = torch.zeros(pairs.shape[0], device=device)
    target[: batch.num_positive] = 1.0
    if forward is not None:  # a model that reads the batch itself (a typed one)
        logits = forward(ddp, batch, pairs)
        loss = F.binary_cross_entropy_with_logits(logits, target)
    elif model.reads_pair_features:  # the decoder's embedding-only head trains the encoder beside it
        logits, auxiliary = ddp(blocks_to(blocks, device), x, pairs, pair_features, auxiliary=True)
        loss = F.binary_cross_entropy_with_logits(logits, target) + F.binary_cross_entropy_with_logits(
            auxiliary, target
        )
    else:
        logits = ddp(blocks_to(blocks, device), x, pairs, pair_features)
        loss = F.binary_cross_entropy_with_logits(logits, target)
    value = float(loss.detach())
    session.check_loss_before_backward(value)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    embeddings = getattr(model, "embeddings", None)
    if isinstance(embeddings, NodeEmbeddings) and x is not None:
        grad = x.grad if x.grad is not None and bool(torch.isfinite(x.grad).all()) else torch.zeros_like(x)
        embeddings.apply_gradients(batch.node_ids, grad)  # every rank, every step: it all-gathers
    correct = int(((logits.detach() > 0) == target.bool()).sum())
    return value, correct, int(pairs.shape[0])


def run_link_training(
    batches_for_epoch: Callable[[int], Iterable[Batch]],
    evaluate: LinkEvaluate | None,
    config: TrainConfig,
    progress_cb: Callable[[TrainProgress], None] | None = None,
    structure: PairStructure | None = None,
    *,
    model: nn.Module | None = None,
    forward: PairForward | None = None,
) -> TrainResult:
    """Train `config.epochs` epochs of link prediction on this rank's batches (see the module docstring).

    `evaluate(model, ctx, embeddings)` returns the metrics by name (val_auc, test_mrr, ...) over all
    ranks; None skips evaluation. `structure` (the training graph's) gives the pair features a
    decoder such as mlp+cn reads. `model` replaces the built-in `LinkModel` and `forward(model, batch,
    pairs)` scores a batch's pairs with it (a typed job's); DDP then allows parameters a batch leaves
    unused (relations or types it does not sample), and learned embeddings of featureless types learn
    at a tenth of the rate, as in the node loop.
    """
    if config.decoder in PAIR_FEATURE_DECODERS and structure is None:
        raise GraphtierError(
            f"the {config.decoder} decoder reads common-neighbour features: pass the graph's structure"
        )
    ctx = DistContext.from_env(config.device, timeout_s=config.dist_timeout_s)
    try:
        report = progress_cb or (lambda _: None)
        return _run(ctx, batches_for_epoch, evaluate, config, report, structure, model, forward)
    finally:
        ctx.shutdown()


def _run(
    ctx: DistContext,
    batches_for_epoch: Callable[[int], Iterable[Batch]],
    evaluate: LinkEvaluate | None,
    config: TrainConfig,
    report: Callable[[TrainProgress], None],
    structure: PairStructure | None,
    model: nn.Module | None = None,
    forward: PairForward | None = None,
) -> TrainResult:
    torch.manual_seed(config.seed)  # identical initial parameters and embeddings on every rank
    module = build_link_model(config) if model is None else model
    module.to(ctx.device)
    parameters = module.parameters() if model is None else typed_param_groups(module, config.lr)
    optimizer = torch.optim.Adam(parameters, lr=config.lr, weight_decay=config.weight_decay)
    session = TrainSession(ctx, config, report)
    position = session.resume(module, optimizer)
    embeddings = getattr(module, "embeddings", None)

    ddp: nn.Module = module
    if ctx.distributed:
        device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        if embeddings is not None:  # one shared table per machine, kept in step by its own all-gathered updates
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
                module, [f"embeddings.{name}" for name in TABLE_BUFFERS]
            )
        ddp = DistributedDataParallel(
            module, device_ids=device_ids, forward_sync_buffers=False, find_unused_parameters=forward is not None
        )

    def run_evaluation(epoch: int, done: int) -> None:
        if evaluate is not None:
            session.record_evaluation(epoch, done, evaluate(module, ctx, embeddings))

    for epoch in range(position.epoch, config.epochs):
        skip = session.skip(epoch)
        session.start_epoch()
        done = 0
        ddp.train()
        # every rank runs the same number of steps (the producers shard evenly), which the embeddings'
        # all-gather needs; join() only shadows DDP's own collectives
        joined = (
            ddp.join() if isinstance(ddp, DistributedDataParallel) and embeddings is None else contextlib.nullcontext()
        )
        with joined:
            for index, batch in enumerate(batches_for_epoch(epoch)):
                if index < skip:
                    batch.release()
                    continue
                if config.max_steps_per_epoch is not None and index >= config.max_steps_per_epoch:
                    batch.release()
                    break
                session.begin_step(epoch, index + 1)
                try:
                    loss, correct, pairs = _link_step(
                        ddp, module, optimizer, batch, ctx.device, session, structure, forward
                    )
                finally:
                    batch.release()
                done = index + 1
                session.record_step(epoch, done, loss, correct, pairs)
        session.end_epoch(epoch, done, partial(run_evaluation, epoch, done))

    if evaluate is not None and session.evaluated_epoch != config.epochs - 1:
        run_evaluation(config.epochs - 1, 0)  # resumed from the last epoch's checkpoint: not evaluated here
    result = session.finish()
    ctx.barrier()
    return result
