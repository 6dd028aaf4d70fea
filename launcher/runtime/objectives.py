"""What the training loop optimises: node classification or link prediction.

The loop (`train_loop.train`) is one for every job: resume, steps, the non-finite guard,
checkpoints, evaluation when due, progress. What differs between the two tasks lives here, in
an `Objective`: the model it builds, its parameter groups and DDP options, the loss of one batch
(and what a step updates besides the optimizer), and how the model is evaluated.

- `NodeClassification`: cross-entropy on the seeds' labels; accuracy of the val and test splits.
- `LinkPrediction`: each batch carries B train edges and their sampled negatives as pairs over its
  seeds (the endpoints); binary cross-entropy on the pairs' logits (positives 1, negatives 0);
  for a featureless graph, a sparse row update of the learned node embeddings (`NodeEmbeddings`)
  after each step; AUC, MRR and Hits@K of val and test (`link_eval.py`).

A heterogeneous model differs only in how it is called on a batch (`forward`); its learned
embeddings of featureless types learn by their own row-wise optimizer (`embedding_optimizer.py`), and DDP allows the
parameters a batch leaves unused (relations or types it does not sample).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.link import PAIR_FEATURE_DECODERS
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import EvalBatches, Forward
from graphtier.launcher.runtime.link_model import TABLE_BUFFERS, LinkModel, NodeEmbeddings
from graphtier.launcher.runtime.models import build_model
from graphtier.launcher.runtime.models.rgcn import HeteroInput, hetero_param_groups
from graphtier.launcher.runtime.session import TrainSession
from graphtier.launcher.runtime.train_config import TrainConfig
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.pipeline.batch import Batch, blocks_to
from graphtier.service.sampling.link import drop_target_edges

LinkEvaluate = Callable[[nn.Module, DistContext, "NodeEmbeddings | None"], dict[str, float]]
PairForward = Callable[[nn.Module, Batch, Tensor], Tensor]  # (model, batch, pairs) -> [P] logits


@dataclass
class StepLoss:
    """One batch's loss (before backward) and its training figures."""

    loss: Tensor
    correct: int  # seeds (node) or pairs (link) the model got right
    counted: int  # labelled seeds or pairs
    after_step: Callable[[], None] | None = None  # what the step updates besides the optimizer's parameters


class Objective(Protocol):
    """What `train` optimises; see the module docstring."""

    def build_model(self, config: TrainConfig) -> nn.Module: ...

    def ddp_options(self, module: nn.Module) -> DdpOptions: ...

    def loss(self, ddp: nn.Module, module: nn.Module, batch: Batch, device: torch.device) -> StepLoss: ...

    @property
    def evaluates(self) -> bool: ...

    def evaluate(self, session: TrainSession, module: nn.Module, epoch: int, batches: int) -> None: ...


@dataclass(frozen=True)
class DdpOptions:
    """How the loop wraps a model in DistributedDataParallel."""

    find_unused_parameters: bool = False  # a heterogeneous batch may leave some relations' or types' weights unused
    ignored: tuple[str, ...] = ()  # parameters and buffers DDP must leave alone (kept in step otherwise)
    sync_buffers: bool = True
    joins: bool = True  # may ranks end an epoch at different batches (DDP's join shadows the missing steps)?


def parameter_groups(module: nn.Module, lr: float, embedding_lr: float | None = None) -> list[dict[str, object]]:
    """The optimizer's groups: learned embeddings of featureless types at their own rate (unless their
    own optimizer trains them), the rest at `lr`."""
    return hetero_param_groups(module, lr, embedding_lr)


def _hetero(module: nn.Module) -> bool:
    return any(isinstance(m, HeteroInput) for m in module.modules())


@dataclass
class NodeClassification:
    """Cross-entropy on the seeds (label -1 = unlabelled, ignored); accuracy of `config.eval_splits`.

    `model` replaces the built-in `config.model`; `forward(model, batch)` computes the seeds' logits
    when the model is not called `(blocks, x)` (a heterogeneous model: `hetero_forward`). `eval_batches(split)`
    yields this rank's batches of a split; None skips evaluation."""

    eval_batches: EvalBatches | None
    model: nn.Module | None = None
    forward: Forward | None = None

    def build_model(self, config: TrainConfig) -> nn.Module:
        if self.model is not None:
            return self.model
        return build_model(
            config.model, config.in_dim, config.hidden, config.num_classes, config.layers, config.dropout, config.heads
        )

    def ddp_options(self, module: nn.Module) -> DdpOptions:
        return DdpOptions(find_unused_parameters=_hetero(module))

    def loss(self, ddp: nn.Module, module: nn.Module, batch: Batch, device: torch.device) -> StepLoss:
        batch = batch.on_device(device)
        y = batch.y
        logits = self.forward(ddp, batch) if self.forward is not None else ddp(batch.blocks, batch.x)
        if logits.shape[0] != y.shape[0]:
            raise GraphtierError(f"the model returned {logits.shape[0]} rows for a batch of {y.shape[0]} seeds")
        labelled = y >= 0
        count = int(labelled.sum())
        loss = F.cross_entropy(logits, y, ignore_index=-1, reduction="sum") / max(count, 1)
        correct = int((logits.detach().argmax(dim=1) == y)[labelled].sum())
        return StepLoss(loss, correct, count)

    @property
    def evaluates(self) -> bool:
        return self.eval_batches is not None

    def evaluate(self, session: TrainSession, module: nn.Module, epoch: int, batches: int) -> None:
        if self.eval_batches is not None:
            session.evaluate(epoch, batches, self.eval_batches, module, forward=self.forward)


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


@dataclass
class LinkPrediction:
    """Binary cross-entropy of each batch's pairs; `evaluate(model, ctx, embeddings)` returns the metrics by
    name (val_auc, test_mrr, ...) over all ranks (None skips evaluation).

    `structure` (the training graph's) gives the pair features a decoder such as mlp+cn reads. `model`
    replaces the built-in `LinkModel` and `forward(model, batch, pairs)` scores a batch's pairs with it
    (a heterogeneous job's `HeteroLinkModel`). `on_best(epoch, figures)` is called on every rank after an evaluation
    that is the best so far, with its figures (a job keeping its test scores writes that evaluation's)."""

    evaluator: LinkEvaluate | None
    structure: PairStructure | None = None
    model: nn.Module | None = None
    forward: PairForward | None = None
    on_best: Callable[[int, dict[str, float]], None] | None = None
    _module: nn.Module | None = field(default=None, repr=False)

    def build_model(self, config: TrainConfig) -> nn.Module:
        if self.model is None and config.decoder in PAIR_FEATURE_DECODERS and self.structure is None:
            raise GraphtierError(
                f"the {config.decoder} decoder reads common-neighbour features: pass the graph's structure"
            )
        self._module = build_link_model(config) if self.model is None else self.model
        return self._module

    def _embeddings(self, module: nn.Module) -> NodeEmbeddings | None:
        embeddings = getattr(module, "embeddings", None)
        return embeddings if isinstance(embeddings, NodeEmbeddings) else None

    def ddp_options(self, module: nn.Module) -> DdpOptions:
        shared_table = self._embeddings(module) is not None
        return DdpOptions(
            find_unused_parameters=_hetero(module),
            # one shared table per machine, kept in step by its own all-gathered updates
            ignored=tuple(f"embeddings.{name}" for name in TABLE_BUFFERS) if shared_table else (),
            sync_buffers=False,
            # the table's all-gather needs every rank at every step; join() only shadows DDP's own collectives
            joins=not shared_table,
        )

    def loss(self, ddp: nn.Module, module: nn.Module, batch: Batch, device: torch.device) -> StepLoss:
        if batch.pairs is None:
            raise GraphtierError(f"batch {batch.batch} carries no pairs: the job's producer does not sample links")
        pairs = batch.pairs.to(device, non_blocking=True)
        target = torch.zeros(pairs.shape[0], device=device)
        target[: batch.num_positive] = 1.0
        if self.forward is not None:  # a model that reads the batch itself (a heterogeneous one)
            logits = self.forward(ddp, batch.on_device(device), pairs)
            loss = F.binary_cross_entropy_with_logits(logits, target)
            return StepLoss(loss, int(((logits.detach() > 0) == target.bool()).sum()), int(pairs.shape[0]))
        assert isinstance(module, LinkModel)
        embeddings = self._embeddings(module)
        if embeddings is not None:
            x = embeddings.rows(batch.node_ids, device)
        else:
            assert isinstance(batch.x, Tensor)  # one node type, featured: a featureless graph's rows are embeddings
            x = batch.x.to(device, non_blocking=True)
        pair_features, blocks = None, batch.blocks
        if module.reads_pair_features:
            assert self.structure is not None
            pair_features = self.structure.features(batch.node_ids[batch.pairs.cpu()]).to(device)
            # scored as test pairs are: without the edge itself to pass messages over (see drop_target_edges)
            blocks = drop_target_edges(list(blocks), batch.pairs, batch.num_positive)
        blocks = blocks_to(blocks, device)
        if module.reads_pair_features:  # the decoder's embedding-only head trains the encoder beside it
            logits, auxiliary = ddp(blocks, x, pairs, pair_features, auxiliary=True)
            loss = F.binary_cross_entropy_with_logits(logits, target)
            loss = loss + F.binary_cross_entropy_with_logits(auxiliary, target)
        else:
            logits = ddp(blocks, x, pairs, pair_features)
            loss = F.binary_cross_entropy_with_logits(logits, target)
        after_step = None
        if embeddings is not None:

            def after_step() -> None:
                grad = x.grad if x.grad is not None and bool(torch.isfinite(x.grad).all()) else torch.zeros_like(x)
                embeddings.apply_gradients(batch.node_ids, grad)  # every rank, every step: it all-gathers

        return StepLoss(loss, int(((logits.detach() > 0) == target.bool()).sum()), int(pairs.shape[0]), after_step)

    @property
    def evaluates(self) -> bool:
        return self.evaluator is not None

    def evaluate(self, session: TrainSession, module: nn.Module, epoch: int, batches: int) -> None:
        if self.evaluator is not None:
            session.record_evaluation(epoch, batches, self.evaluator(module, session.ctx, self._embeddings(module)))
            if self.on_best is not None and session.best_epoch == epoch:
                self.on_best(epoch, dict(session.best_eval))
