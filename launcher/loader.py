"""The implementation of a training script's API, public as `graphtier.loader` (whose docstring
and the API reference describe it): `connect()` attaches the script to this machine's daemon, as a
job the daemon started (`job submit --script`) or one its ranks register (`torchrun`, `python`),
and hands each rank its `Job`: batches read out of the producers' slots, progress, checkpoints,
evaluation and the built-in loop (`fit`).
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.environment import JOB_ID_ENV, RUNTIME_DIR_ENV
from graphtier.contract.errors import DaemonError, GraphtierError
from graphtier.contract.fanouts import parse_fanouts
from graphtier.contract.hetero import HeteroSchema
from graphtier.contract.inference import DEFAULT_CHUNK
from graphtier.contract.jobs.artifact import DatasetVersion, ModelConfig
from graphtier.contract.jobs.directory import checkpoint_dir, job_directory, link_scores_dir
from graphtier.contract.jobs.rank_failures import write_rank_failure
from graphtier.contract.jobs.spec import PREAGGREGATED_MODEL, JobSpec
from graphtier.contract.link import DEFAULT_HITS_K, PAIR_FEATURE_DECODERS
from graphtier.contract.processes import run_as_job_work
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.launcher.runtime.attach import attach_spec, launch_identity, sized_for_launch
from graphtier.launcher.runtime.channel_loader import ChannelLoader
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import Forward, seed_logits
from graphtier.launcher.runtime.exported_model import JobOutputs, load_model
from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches, hetero_forward
from graphtier.launcher.runtime.hetero_link import (
    HeteroLinkBatches,
    HeteroLinkModel,
    evaluate_hetero_links,
    hetero_pair_forward,
)
from graphtier.launcher.runtime.launch_secret import discard_launch_secret
from graphtier.launcher.runtime.layerwise_run import LayerwiseRun
from graphtier.launcher.runtime.link_eval import SplitScores, evaluate_links
from graphtier.launcher.runtime.link_model import NodeEmbeddings, ResidualAdamicAdarDecoder
from graphtier.launcher.runtime.link_scores import write_link_scores
from graphtier.launcher.runtime.local_batches import LocalBatchSource
from graphtier.launcher.runtime.metapath_inputs import MetapathInputs
from graphtier.launcher.runtime.models import build_hetero_model
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions
from graphtier.launcher.runtime.models.preagg import PreAggregated
from graphtier.launcher.runtime.models.rgcn import HeteroInput
from graphtier.launcher.runtime.objectives import LinkPrediction, NodeClassification, Objective
from graphtier.launcher.runtime.reporter import ProgressReporter
from graphtier.launcher.runtime.session import TrainSession
from graphtier.launcher.runtime.train_config import TrainConfig, TrainResult
from graphtier.launcher.runtime.train_loop import train
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling.hetero_sampler import node_types_of
from graphtier.service.sampling.subgraph import Block
from graphtier.service.store import AttachedDataset, attach_dataset

HETERO_EVAL_BATCH_SIZE = 1024  # the fewest seeds per evaluation batch of a heterogeneous job (few passes, same figures)

__all__ = ["Batch", "Block", "DatasetInfo", "Job", "connect", "load_model"]


@dataclass(frozen=True)
class DatasetInfo:
    """What a script needs to size its model and read its data: `job.dataset`.

    Attributes:
        name: The dataset's name.
        num_nodes: Nodes of the graph, of every type.
        num_edges: Edges of the graph messages pass over (a link-prediction dataset's training edges).
        feature_dim: Width of a node's input features; 0 when the dataset has none.
        num_classes: Label classes of node classification.
        split_sizes: Ids in each split (`train`, `val`, `test`).
        fanouts: Neighbours per hop of the job's sampler; as many hops as model layers.
        batch_size: Seed nodes per batch per rank.
        steps_per_epoch: Batches per epoch, the same on every rank.
        hetero: A heterogeneous dataset's node types, relations and target type; None for a graph of
            one type.
    """

    name: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    split_sizes: dict[str, int]
    fanouts: list[int]
    batch_size: int
    steps_per_epoch: int
    hetero: HeteroSchema | None = None


class Job:
    """One rank's side of a job: made by `connect()`, ended by `with` or `close()`.

    Attributes:
        job_id (str): The daemon's id of the job.
        spec (JobSpec): The job as submitted or registered: `job.spec.hidden`, `job.spec.lr`, ...
        dataset (DatasetInfo): The dataset's and the batches' sizes.
    """

    def __init__(self, client: DataPlaneClient, job_id: str, runtime_dir: Path, spec: JobSpec) -> None:
        self.client, self.job_id, self.spec = client, job_id, spec
        self.job_dir = job_directory(runtime_dir, job_id)
        self.ctx = DistContext.from_env(spec.device)
        try:
            self.channel = ChannelLoader.open(client, job_id, self.ctx.rank)
        except BaseException:
            self.ctx.shutdown()
            raise
        try:
            # the version this job started with, even if the dataset was prepared again since; its storage
            # rows (the rank's own evaluation batches) read as the job's producers read them
            layout = client.dataset_layout(spec.dataset, job_id=job_id)
            self.data: AttachedDataset = attach_dataset(layout.handle, storage_reads=spec.storage_reads)
        except BaseException as exc:
            self.channel.close(f"{type(exc).__name__}: {exc}")
            self.ctx.shutdown()
            raise
        grant = self.channel.grant
        self.dataset = DatasetInfo(
            name=spec.dataset,
            num_nodes=self.data.graph.num_nodes,
            num_edges=self.data.graph.num_edges,
            feature_dim=grant.feature_dim,
            num_classes=grant.num_classes,
            split_sizes={name: int(ids.numel()) for name, ids in self.data.splits.items()},
            fanouts=list(spec.fanouts),
            batch_size=spec.batch_size,
            steps_per_epoch=self.channel.steps_per_epoch,
            hetero=self.data.handle.hetero,
        )
        link = spec.task == "link"
        self.is_hetero = self.data.is_hetero  # heterogeneous batches: per-type x, relations and node types
        self.config = TrainConfig.for_job(  # the spec's model, optimisation, checkpoints; the data's sizes
            spec,
            # a link job's encoder outputs `hidden`-wide embeddings; a featureless graph's input is a learned row
            in_dim=grant.feature_dim or spec.hidden if link or self.is_hetero else grant.feature_dim,
            num_classes=spec.hidden if link else grant.num_classes,
            # a heterogeneous graph's featureless types have their embeddings in the heterogeneous model instead
            learned_embeddings=self.data.graph.num_nodes
            if link and not grant.feature_dim and not self.is_hetero
            else 0,
            best_split=f"val_hits@{DEFAULT_HITS_K}" if link else "val",
            layers=len(spec.fanouts),
            checkpoint_dir=checkpoint_dir(self.job_dir),
            log_every_steps=max(1, min(10, self.channel.steps_per_epoch // 10)),
        )
        self.reporter = ProgressReporter(client, job_id, self.ctx.rank, self.channel)
        # the job's curves and, when it succeeds, its exported model: into its directory, by each node's first rank
        self.outputs = JobOutputs(
            self.job_dir,
            job_id,
            DatasetVersion(name=spec.dataset, version=layout.version, num_nodes=self.data.graph.num_nodes),
        )
        self.session = TrainSession(self.ctx, self.config, self.reporter, self.outputs)
        self._eval: LocalBatchSource | HeteroLocalBatches | None = None
        self._hetero_links: HeteroLinkBatches | None = (
            None  # a heterogeneous link job's evaluation: its embedding batches
        )
        if (
            self.is_hetero
        ):  # every neighbour, as the model would see the whole heterogeneous graph: exact at any batch size
            fanouts = spec.relation_fanouts or spec.fanouts
            shard = (self.data, fanouts, spec.batch_size, self.ctx.rank, self.ctx.world_size, spec.seed)
            eval_fanouts, eval_batch_size = [-1] * len(spec.fanouts), max(spec.batch_size, HETERO_EVAL_BATCH_SIZE)
            if spec.model == PREAGGREGATED_MODEL and not spec.script:  # it reads its seeds' ids, not their neighbours
                eval_fanouts = [1] * len(spec.fanouts)
            if link:  # a heterogeneous link job evaluates from its embedding batches
                self._hetero_links = HeteroLinkBatches(
                    *shard, negatives=spec.negatives, eval_fanouts=eval_fanouts, eval_batch_size=eval_batch_size
                )
            else:
                self._eval = HeteroLocalBatches(*shard, eval_fanouts=eval_fanouts, eval_batch_size=eval_batch_size)
        elif not link:
            self._eval = LocalBatchSource(
                self.data,
                spec.fanouts,
                spec.batch_size,
                self.ctx.rank,
                self.ctx.world_size,
                spec.seed,
                eval_fanouts=spec.eval_fanouts or None,  # -1: every neighbour, figures independent of the sample
            )
        self._epoch, self._index = 0, 0
        self._current: Batch | None = None  # the batch `batches()` yielded last, until its step ends
        self._finished = self._closed = False
        self._launch: tuple[str, int] | None = None  # (launch id, agent pid) of a launch this script registered
        self._prepared: PreparedDataset | None = None
        # a decoder reading common-neighbour features: over the training graph, built once for training and evaluation
        self._pair_structure = (
            PairStructure(self.data.graph) if link and spec.decoder in PAIR_FEATURE_DECODERS else None
        )
        # a link job keeping its test scores: each evaluation's, written when it is the best so far
        self._kept: dict[str, SplitScores] | None = {} if link and spec.link_scores else None
        torch.manual_seed(spec.seed)  # the model a script builds next starts alike on every rank

    # Who and where

    @property
    def rank(self) -> int:
        """This rank's number among all of the job's ranks, from 0."""
        return self.ctx.rank

    @property
    def world_size(self) -> int:
        """The job's ranks on all of its nodes."""
        return self.ctx.world_size

    @property
    def device(self) -> torch.device:
        """cpu, or cuda:LOCAL_RANK for a job submitted with device cuda."""
        return self.ctx.device

    @property
    def global_step(self) -> int:
        """Optimizer steps counted by `step()` so far (resumed ones included)."""
        return self.session.step

    @property
    def args(self) -> list[str]:
        """The script's arguments as submitted (also its sys.argv[1:])."""
        return list(self.spec.args)

    # The loop

    def prepare(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> nn.Module:
        """Ready `model` to train: on `device`, resumed, wrapped in DDP when there are several ranks.

        A restarted rank resumes `model` and `optimizer` from the job's newest checkpoint, so
        training goes on where it stopped.

        Args:
            model: The script's model.
            optimizer: The optimizer of `model`'s parameters; its state is resumed with them.

        Returns:
            The module to train: `model` itself on one rank, its `DistributedDataParallel` on several.
        """
        model.to(self.device)
        at = self.session.resume(model, optimizer)
        if self.session.resumed_from is not None:
            print(
                f"resumed from {self.session.resumed_from.name}: epoch {at.epoch}, {at.batch} batches into it, "
                f"step {at.step}",
                flush=True,
            )
        if not self.ctx.distributed:
            return model
        return DistributedDataParallel(
            model,
            device_ids=[self.device.index] if self.device.type == "cuda" else None,
            # a heterogeneous batch may leave some relations' or types' weights unused
            find_unused_parameters=self.is_hetero,
        )

    def epochs(self) -> Iterator[int]:
        """The epochs left to train: all of them, or those after the checkpoint resumed from.

        At the end of each, rank 0 checkpoints the prepared model and the epoch's figures are
        reported to the daemon.

        Yields:
            Each epoch's number, from 0.
        """
        for epoch in range(self.session.position.epoch, self.spec.epochs):
            self.session.start_epoch()
            self._epoch, self._index = epoch, 0
            yield epoch
            self.session.end_epoch(epoch, self._index)

    def batches(self, epoch: int | None = None) -> Iterator[Batch]:
        """This rank's batches of one epoch, on `device`, skipping those a resumed checkpoint covers.

        A batch is a view of the producer's slot: it is handed back when the next one is asked
        for, so keep no reference to its tensors beyond its step.

        Args:
            epoch: The epoch to read; None: the current one of `epochs()`.

        Yields:
            The epoch's batches in order.
        """
        epoch = self._epoch if epoch is None else epoch
        self._epoch, skip = epoch, self.session.skip(epoch)
        for index, batch in enumerate(self.channel.batches_for_epoch(epoch)):
            if index < skip:
                batch.release()
                continue
            current = batch.on_device(self.device)
            self._index, self._current = index + 1, current
            self.session.begin_step(epoch, index + 1)  # names the step if its gradients turn out non-finite
            try:
                yield current
            finally:
                self._current = None
                batch.release()
        self.session.end_batches()  # an evaluation in the epoch's body is not counted as training

    def step(self, loss: Tensor | float, logits: Tensor | None = None) -> None:
        """Count one optimizer step on the current batch; report progress and checkpoint when due.

        Args:
            loss: The step's loss.
            logits: The model's output for the batch, the seeds' rows first; given, the step's
                training accuracy is counted too.

        Raises:
            GraphtierError: Called outside `for batch in job.batches()`, or `logits` with fewer
                rows than the batch has seeds.
        """
        if self._current is None:
            raise GraphtierError(
                "job.step() counts a step on the current batch: call it inside `for batch in job.batches()`"
            )
        value = float(loss.detach()) if isinstance(loss, Tensor) else float(loss)
        correct = labelled = 0
        if logits is not None:
            y = self._current.y
            mask = y >= 0
            predicted = seed_logits(logits.detach(), y.numel()).argmax(dim=1)
            correct, labelled = int((predicted == y)[mask].sum()), int(mask.sum())
        self.session.record_step(self._epoch, self._index, value, correct, labelled)

    def _prepared_dataset(self) -> PreparedDataset:
        """The prepared dataset behind the job's copy (its id maps), opened once."""
        if self._prepared is None:
            endpoints = read_endpoints(self.client.runtime_dir)
            if endpoints is None:
                raise GraphtierError(f"no daemon at {self.client.runtime_dir} to say where {self.spec.dataset!r} lives")
            self._prepared = PreparedDataset.open(self.spec.dataset, Path(endpoints.dataset_root))
        return self._prepared

    def source_ids(self, ids: Tensor) -> Tensor:
        """The source's ids of this job's nodes, so that predictions line up with the source's files.

        graphtier numbers nodes by hotness rank: a batch's `node_ids` and a split's ids are in that
        numbering.

        Args:
            ids: Node ids of this job's dataset.

        Returns:
            The same nodes' ids in the source the dataset was prepared from.

        Raises:
            GraphtierError: No daemon answers to say where the dataset lives.
        """
        return self._prepared_dataset().source_ids(ids)

    def layerwise(
        self,
        widths: Sequence[int],
        *,
        ids: str | Path | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        key: str | None = None,
        input_rows: Callable[[Tensor], Tensor] | None = None,
    ) -> LayerwiseRun:
        """Layer-wise inference of your own model over this job's graph, as `graphtier job predict` runs it.

        Every layer is computed for every node (or for the receptive field of the nodes `ids` names) over
        its full neighbourhood, one layer after the other, this rank a contiguous shard of each layer.
        Every rank iterates the run and writes each chunk's rows, then saves or reads them:

            run = job.layerwise([hidden, num_classes])
            for chunk in run:   # chunk.layer, chunk.block (full neighbourhood), chunk.x (its input rows)
                chunk.write(my_layer(chunk.layer, chunk.block, chunk.x))
            run.save({"embeddings": 0, "logits": 1})   # npy shards in the source's ids
            run.close()

        Layer 0's `chunk.x` are the features read through the tiers (on a heterogeneous graph a dict by node
        type); later layers' are the previous layer's rows.

        Args:
            widths: The width of each layer's output rows, input layer first.
            ids: A file of the source's node ids (a 1-D integer .npy, or one id a line) whose rows to
                compute; None computes every node.
            chunk_size: Destination nodes per chunk.
            key: Names the run, so that a rank restarted by torchrun resumes it after its last complete
                layer; default: the job's step count, the widths and `ids`.
            input_rows: Replaces layer 0's features: `input_rows(nodes)` gives the rows of graphtier ids
                `nodes` (e.g. a model's learned embeddings).

        Returns:
            The run: iterate it, then `save`, `rows` and `close`.

        Raises:
            GraphtierError: A width is not a positive int, or the ids file names nodes the dataset lacks.
        """
        if key is None:
            key = f"step {self.session.step}:{list(widths)}:{ids or ''}"
        ids_file = Path(ids) if ids is not None else None
        return LayerwiseRun(
            self.data,
            self._prepared_dataset,
            self.ctx,
            self.job_id,
            self.job_dir,
            widths,
            ids_file=ids_file,
            chunk_size=chunk_size,
            key=f"script:{key}",
            input_rows=input_rows,
        )

    def split_ids(self, split: str) -> Tensor:
        """The node ids of a split, in graphtier's numbering (`source_ids` maps them to the source's).

        Args:
            split: `train`, `val` or `test`.

        Returns:
            The split's node ids (int64).

        Raises:
            GraphtierError: The dataset has no such split.
        """
        if split not in self.data.splits:
            raise GraphtierError(
                f"dataset {self.spec.dataset!r} has no split {split!r}; it has {sorted(self.data.splits)}"
            )
        return self.data.splits[split]

    def evaluate(
        self, model: nn.Module, splits: tuple[str, ...] = ("val", "test"), forward: Forward | None = None
    ) -> dict[str, float]:
        """Accuracy of `model` on each split, over all ranks: every rank must call it.

        Each split's nodes are sampled with the job's fanouts (a heterogeneous job's with every neighbour)
        and evaluated on `device`. The figures are reported to the daemon as the job's latest, and
        as its best (`result.best` of `job status`) when the validation accuracy is the highest so
        far.

        Args:
            model: The model to evaluate, as `prepare` returned it.
            splits: The splits to measure.
            forward: `forward(model, batch)` returns the logits, e.g.
                `lambda m, b: m(b.x, b.edge_index)`; None: `model(batch.blocks, batch.x)` (on a
                heterogeneous dataset, the call of the built-in heterogeneous models).

        Returns:
            Accuracy per split, such as `{"val": ..., "test": ...}`.

        Raises:
            GraphtierError: On a link-prediction job (its metrics come from `fit`), or for a split
                the dataset lacks.
        """
        if self._eval is None:
            raise GraphtierError(
                "job.evaluate() measures node classification; a link-prediction job's model is evaluated by "
                "job.fit() (AUC, MRR and Hits@K in the job's result)"
            )
        missing = [s for s in splits if s not in self.data.splits]
        if missing:
            raise GraphtierError(
                f"dataset {self.spec.dataset!r} has no split {missing[0]!r}; it has {sorted(self.data.splits)}"
            )
        if forward is None and self.is_hetero:
            forward = hetero_forward
        return self.session.evaluate(self._epoch, self._index, self._eval.eval_batches, model, forward, tuple(splits))

    def fit(self, model: nn.Module | None = None) -> TrainResult:
        """Train with the built-in loop: Adam, evaluation every epoch, checkpoints, resume.

        Node classification minimises cross-entropy over the seeds; a link-prediction job builds
        its own model (the spec's encoder and decoder) and minimises binary cross-entropy over its
        pairs.

        Args:
            model: A module taking `(blocks, x)` (on a heterogeneous job `(blocks, edge_types,
                node_ids, node_types, x)` with `x` per node type, as the built-in R-GCN and HGT
                do); None builds the spec's built-in `model`.

        Returns:
            How training went (`TrainResult`): the trained model, the last and the best
                evaluation, the steps and epochs done.

        Raises:
            GraphtierError: A model given to a link-prediction job.
        """
        if model is not None and self.spec.task == "link":
            raise GraphtierError("job.fit(model) trains node classification; a link job builds its own model")
        outputs = self.outputs if model is not None else replace(self.outputs, model=self.builtin_model_config())
        result = train(
            self.channel.batches_for_epoch,
            self._objective(model),
            self.config,
            self.reporter,
            even_batches=True,
            outputs=outputs,
        )
        self._finished = True
        return result

    def builtin_model_config(self) -> ModelConfig:
        """The configuration of the built-in model `fit()` trains on this job (what its exported model records)."""
        spec, config, link = self.spec, self.config, self.spec.task == "link"
        schema = self.data.handle.hetero if self.is_hetero else None
        return ModelConfig(
            builtin=True,
            kind=spec.model,
            task=spec.task,
            in_dim=0 if schema is not None else config.in_dim,
            hidden=spec.hidden,
            out_dim=spec.hidden if link else self.dataset.num_classes,
            layers=len(spec.fanouts),
            heads=spec.heads,
            dropout=spec.dropout,
            decoder=spec.decoder if link else None,
            learned_embeddings=config.learned_embeddings,
            hetero=schema,
            embedding_dropout=spec.embedding_dropout if schema is not None else 0.0,
            featureless_init=spec.featureless_init if schema is not None else "zero",
        )

    def _objective(self, model: nn.Module | None) -> Objective:
        """What `fit` optimises: the job's task, over its heterogeneous or homogeneous model."""
        spec = self.spec
        if self._hetero_links is not None:
            # the spec's rgcn, rgat or hgt encoder and its decoder on the target relation's pairs, evaluated with every
            # node of the head and tail types embedded over its whole neighbourhood
            loader = self._hetero_links
            encoder = HeteroLinkModel(
                loader.schema,
                spec.hidden,
                len(spec.fanouts),
                model=spec.model,
                decoder=spec.decoder,
                dropout=spec.dropout,
                heads=spec.heads,
                featureless=self._featureless,
            )
            self._load_neighbour_means(encoder)
            return LinkPrediction(
                lambda _module, _ctx, _embeddings: evaluate_hetero_links(  # the module is `encoder`
                    encoder, loader, kept=self._kept
                ),
                model=encoder,
                forward=hetero_pair_forward,
                on_best=self._keep_link_scores if self._kept is not None else None,
            )
        if self._eval is None:
            return LinkPrediction(
                self._evaluate_links,
                structure=self._pair_structure,
                on_best=self._keep_link_scores if self._kept is not None else None,
            )
        if not self.is_hetero:
            return NodeClassification(self._eval.eval_batches, model)
        schema = self.data.handle.hetero
        assert schema is not None
        forward = hetero_forward
        if model is None:
            model = build_hetero_model(
                spec.model,
                schema,
                spec.hidden,
                self.dataset.num_classes,
                len(spec.fanouts),
                spec.dropout,
                spec.heads,
                self._featureless,
            )
            if spec.model == PREAGGREGATED_MODEL:  # an MLP over its seeds' metapath features, computed once
                inputs = MetapathInputs.for_job(
                    self.data,
                    self.job_dir,
                    self.outputs.dataset.version if self.outputs.dataset else "",
                    len(spec.fanouts),
                    self.dataset.num_classes,
                    self.ctx,
                )
                assert isinstance(model, PreAggregated)
                model.standardise_by(inputs.features.matrix)
                forward = inputs.forward
            self._load_neighbour_means(model)
        return NodeClassification(self._eval.eval_batches, model, forward)

    @property
    def _featureless(self) -> FeaturelessOptions:
        """How the job's built-in heterogeneous model takes its featureless types."""
        return FeaturelessOptions(init=self.spec.featureless_init, dropout=self.spec.embedding_dropout)

    def _load_neighbour_means(self, model: nn.Module) -> None:
        """The prepared dataset's neighbour means into `model`'s input (featureless_init neighbour-mean)."""
        inputs = [m for m in model.modules() if isinstance(m, HeteroInput)]
        for module in inputs:
            names = module.neighbour_mean_arrays()
            if names:
                prepared = self._prepared_dataset()
                module.load_neighbour_means({name: prepared.array(name) for name in names})

    def _evaluate_links(
        self, model: nn.Module, ctx: DistContext, embeddings: NodeEmbeddings | None
    ) -> dict[str, float]:
        every_neighbour = [-1] * len(self.spec.fanouts)  # exact embeddings, as full-batch inference computes them
        metrics = evaluate_links(
            model,
            self.data,
            every_neighbour,
            self.spec.batch_size,
            ctx,
            embeddings,
            self.spec.seed,
            structure=self._pair_structure,
            kept=self._kept,
        )
        decoder = getattr(getattr(model, "module", model), "decoder", None)
        if isinstance(decoder, ResidualAdamicAdarDecoder) and ctx.rank == 0:
            c, k = decoder.calibration, DEFAULT_HITS_K
            print(
                f"{self.spec.decoder} decoder: Adamic-Adar weighed {c['weight']:g} by validation Hits@{k} "
                f"{c[f'val_hits@{k}']:.4f} (AUC {c['val_auc']:.4f}; without it {c[f'learned_val_hits@{k}']:.4f}, "
                f"AUC {c['learned_val_auc']:.4f})",
                flush=True,
            )
        return metrics

    def _keep_link_scores(self, epoch: int, best: dict[str, float]) -> None:
        """Rank 0 writes the test scores of epoch `epoch`'s evaluation (figures `best`), the best so far, to
        `link-scores/` in the job's directory, its pairs in the source's ids (heterogeneous: each end in its
        type's own)."""
        if self.rank != 0 or not self._kept or "test" not in self._kept:
            return
        figures = {name: value for name, value in best.items() if name.startswith("test_")}
        path = write_link_scores(
            link_scores_dir(self.job_dir),
            self._kept["test"],
            epoch=epoch,
            hits_k=DEFAULT_HITS_K,
            metrics=figures,
            source_ids=self._source_ids_by_type if self.is_hetero else self.source_ids,
        )
        print(f"kept the test scores of epoch {epoch} in {path.parent}", flush=True)

    def _source_ids_by_type(self, ids: Tensor) -> Tensor:
        """The source's ids of heterogeneous global ids `ids`, each in its own node type's ids."""
        schema = self.data.handle.hetero
        assert schema is not None
        offsets = torch.tensor(schema.offsets(), dtype=torch.int64)
        old = self.source_ids(ids)
        return old - offsets[node_types_of(old, offsets)]

    # The end

    def close(self, error: BaseException | None = None) -> None:
        """End this rank's side: report the end, give the channel back, leave the process group.

        Idempotent; leaving a `with connect(...)` block calls it.

        Args:
            error: The exception the script failed with; None: it finished, and the end is reported.
        """
        if self._closed:
            return
        self._closed = True
        if error is not None:  # before leaving the process group: the peers' lost connections come after it
            write_rank_failure(self.job_dir, self.rank, error)
        if error is None and self._launch is not None and os.environ.get("LOCAL_RANK") == "0":
            discard_launch_secret(*self._launch)  # the node's ranks all attached long ago; none will again
        try:
            if error is None and not self._finished:
                self.session.finish(self._epoch + 1)
            self.channel.close("" if error is None else f"{type(error).__name__}: {error}")
        finally:
            self.data.detach()
            self.ctx.shutdown()
            self.client.close()

    def close_at_exit(self) -> None:
        """Close the job when the interpreter exits, so a script without `with` still ends its job.

        `connect()` calls it for a job the script registered; an exception that ends the script
        fails the job with it.
        """
        previous_hook = sys.excepthook

        def record(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
            with contextlib.suppress(GraphtierError):  # the daemon may be gone: what the script died of matters
                self.close(exc)
            if isinstance(exc, DaemonError | ChannelError):  # the daemon or its producer, not the script's code
                print(f"graphtier: rank {self.rank} of job {self.job_id}: {exc}", file=sys.stderr, flush=True)
                return  # the interpreter exits with status 1, as after any uncaught exception
            previous_hook(exc_type, exc, tb)

        sys.excepthook = record
        atexit.register(self.close)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.close(exc)


def spec_keywords(model: type[JobSpec] = JobSpec) -> tuple[str, ...]:
    """The keywords `connect()` takes for the job it registers: the job model's fields (but `dataset`, its
    first argument) and `fanout`, the command line's --fanout."""
    return (*(name for name in model.model_fields if name != "dataset"), "fanout")


def check_keywords(fields: dict[str, Any], model: type[JobSpec] = JobSpec) -> None:
    """GraphtierError naming a `connect()` keyword that is not a job's (`spec_keywords()`), and the ones there are."""
    known = spec_keywords(model)
    unknown = [name for name in fields if name not in known]
    if unknown:
        close = {name: difflib.get_close_matches(name, known, n=1) for name in unknown}
        hints = [f"{name!r}" + (f" (did you mean {match[0]!r}?)" if match else "") for name, match in close.items()]
        raise GraphtierError(
            f"graphtier.connect(): unknown keyword {', '.join(hints)}; a job takes {', '.join(known)} "
            "(JobSpec's fields), besides job_id, runtime_dir and priority"
        )


def _spec_values(dataset: str, fields: dict[str, Any]) -> dict[str, Any]:
    """JobSpec values from `connect()`'s keywords: the spec's field names, `fanout` as the CLI's
    --fanout ("15,10,5" or a list); the running script and its arguments recorded as the job's."""
    values = dict(fields)
    if "fanout" in values:
        if "fanouts" in values:
            raise GraphtierError("graphtier.connect(): give fanout or fanouts, not both")
        values["fanouts"] = parse_fanouts(values.pop("fanout"), given_as="graphtier.connect(): fanout")
    script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    if script is not None and script.is_file() and "script" not in values:
        values["script"] = str(script)
        values.setdefault("args", sys.argv[1:])
    return {"dataset": dataset, **values}


def _run_as_the_daemons_ranks(runtime_dir: Path) -> None:
    """Demote this rank as the daemon demotes the ranks it starts (relative to the daemon's niceness)."""
    endpoints = read_endpoints(runtime_dir)
    daemon_niceness = 0  # the usual, when the daemon cannot be asked
    if endpoints is not None:
        with contextlib.suppress(OSError):  # the daemon just answered; gone now, its job fails on its own
            daemon_niceness = os.getpriority(os.PRIO_PROCESS, endpoints.pid)
    run_as_job_work(daemon_niceness)


def connect(
    dataset: str | None = None,
    *,
    job_id: str | None = None,
    runtime_dir: Path | None = None,
    priority: Literal["job", "inherit"] = "job",
    **spec: Any,
) -> Job:
    """This rank's side of its job: the one the daemon started, or one registered from here.

    Inside a job the daemon started (`job submit --script`, which sets GRAPHTIER_JOB_ID), that job,
    whose submitted spec decides. Otherwise -- a script launched by `torchrun --nproc-per-node N
    train.py`, by torchrun on several machines, or by plain `python train.py` -- `dataset` and
    `spec` register a job with this machine's daemon: the node's first rank makes it, the launch's
    other ranks join it (by torchrun's run id, master address and agent), the daemon starts one
    producer per rank, and the job ends when the ranks close it, or fails when they die. Call it
    early: each rank's producer waits a limited time (120 s) for its rank to open its channel.

    Args:
        dataset: The prepared dataset to train on. Inside a job the daemon started, when given, it
            must be that job's dataset.
        job_id: The job to attach to; None: GRAPHTIER_JOB_ID, else a job registered from `spec`.
        runtime_dir: The daemon's runtime directory; None: GRAPHTIER_RUNTIME_DIR, else the default.
        priority: For a job this script registers: "job" runs this rank as the daemon runs the
            ranks it starts (5 more nice than the daemon, SCHED_BATCH), so that the daemon's
            control plane answers first when cores are short, and its producer at the same
            priority; "inherit" keeps the launch's priority, and the producer runs at the
            daemon's. Niceness only ever rises: an unprivileged process cannot lower it back.
        **spec: The fields of a job this script registers: `JobSpec`'s by name (`batch_size`,
            `epochs`, `lr`, ...; `spec_keywords()` lists them) and `fanout` as the command
            line's `--fanout` ("15,10,5" or a list).

    Returns:
        The rank's `Job`, to use in a `with` block (a job this script registered is also closed
            when the interpreter exits).

    Raises:
        GraphtierError: No job to attach to and no `dataset`, a `dataset` other than the job's, a
            bad `priority` or `fanout`, a keyword that is not a job's (naming the ones there
            are), or values a job cannot have (`InvalidRequestError`, naming each);
            `DaemonNotRunningError` when no daemon runs for the runtime directory.
    """
    if priority not in ("job", "inherit"):
        raise GraphtierError(f"graphtier.connect(priority={priority!r}): give 'job' or 'inherit'")
    check_keywords(spec)
    job_id = job_id or os.environ.get(JOB_ID_ENV)
    attached = False
    if not job_id:
        if dataset is None:
            raise GraphtierError(
                f"{JOB_ID_ENV} is not set and no dataset was given: call graphtier.connect(dataset=NAME, ...) to "
                "register a job from this script (under torchrun or alone), or submit the script with "
                "`graphtier job submit --dataset NAME --script FILE`"
            )
        if runtime_dir is not None:
            os.environ[RUNTIME_DIR_ENV] = str(runtime_dir)
        launch_id, node_rank, agent_pid = launch_identity()
        asked = sized_for_launch(_spec_values(dataset, spec), "graphtier.connect()")
        job_id, runtime_dir = attach_spec(asked, launch_id, node_rank, agent_pid)
        attached = True
        if priority == "job":  # before the first batch: the producer starts then, at this rank's priority
            _run_as_the_daemons_ranks(runtime_dir)
    where = runtime_dir or os.environ.get(RUNTIME_DIR_ENV)
    client = DataPlaneClient(runtime_dir=Path(where) if where else None)
    try:
        submitted = client.get_job(job_id).spec
        if dataset is not None and dataset != submitted.dataset:
            raise GraphtierError(
                f"graphtier.connect(dataset={dataset!r}) but job {job_id} trains on {submitted.dataset!r}"
            )
        job = Job(client, job_id, client.runtime_dir, submitted)
    except BaseException:
        client.close()
        raise
    if attached:
        job._launch = (launch_id, agent_pid)
        job.close_at_exit()
    return job
