"""The public API of a training script, imported as `graphtier.loader` (or `graphtier.connect`).

A script gets its job one of two ways. Submitted -- `graphtier job submit --dataset cora --script
train.py [--script-args ...]` (or `script:`/`args:` in a YAML job spec) -- the daemon runs it under
torchrun, one process per rank. Launched by you -- `torchrun --nproc-per-node 2 train.py`, torchrun
on several machines, or `python train.py` for one rank -- `connect(dataset=..., fanout=..., ...)`
registers the job with this machine's daemon from inside the ranks. Either way the job's producers
sample and gather into shared memory exactly as for a built-in model, and `connect()` gives this
rank its side of the job:

    import torch, torch.nn.functional as F
    import graphtier

    with graphtier.connect(dataset="cora", fanout="25,10", batch_size=64, epochs=30) as job:
        model = MyGNN(job.dataset.feature_dim, job.spec.hidden, job.dataset.num_classes)
        optimizer = torch.optim.Adam(model.parameters(), lr=job.spec.lr)
        model = job.prepare(model, optimizer)        # to job.device, resume from a checkpoint, DDP
        for epoch in job.epochs():                   # from the resumed epoch; checkpoints at each end
            for batch in job.batches(epoch):         # blocks, x, y, edge_index on job.device
                logits = model(batch.blocks, batch.x)    # or model(batch.x, batch.edge_index)
                loss = F.cross_entropy(logits[: batch.num_seeds], batch.y)
                optimizer.zero_grad(); loss.backward(); optimizer.step()
                job.step(loss, logits)               # progress to the daemon; checkpoints every N steps
        print(job.evaluate(model))                   # {'val': 0.80, 'test': 0.79}, over all ranks

`batch.blocks` are `Block`s, one bipartite CSC graph per layer (input layer first): `indptr`
[num_dst + 1] and `indices` (source local ids) with the destinations also the first sources, as
DGL's message-flow graphs; `graphtier.dgl.to_dgl_blocks` turns them into `dgl.create_block` blocks.

`job.fit(model)` runs the built-in loop (Adam, cross-entropy, evaluation every epoch) on any
module taking `(blocks, x)`: the built-in models are trained exactly so. Progress, metrics,
the status page, `job status` and restarts (`max_restarts`, from the job's checkpoints) work
the same for either. An exception ends the job FAILED with its last line as the cause. Batches
are zero-copy views of the producer's slot on CPU: a batch is handed back when the next one is
asked for, so keep no reference to its tensors beyond its step. Call `connect()` early: each
rank's producer waits for its rank's channel to be opened (120 s), then fails the job.
"""

from __future__ import annotations

import atexit
import contextlib
import difflib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.environment import JOB_ID_ENV, RUNTIME_DIR_ENV
from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.contract.jobs.directory import checkpoint_dir, job_directory
from graphtier.contract.jobs.rank_failures import write_rank_failure
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.link import DEFAULT_HITS_K, PAIR_FEATURE_DECODERS
from graphtier.contract.processes import run_as_job_work
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.launcher.runtime.attach import attach_spec, launch_identity, sized_for_launch
from graphtier.launcher.runtime.batch import Batch, on_device, seed_logits
from graphtier.launcher.runtime.channel_loader import ChannelLoader
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.evaluation import Forward
from graphtier.launcher.runtime.link_eval import evaluate_links
from graphtier.launcher.runtime.link_model import NodeEmbeddings, ResidualAdamicAdarDecoder
from graphtier.launcher.runtime.local_batches import LocalBatchSource
from graphtier.launcher.runtime.models import build_typed_model
from graphtier.launcher.runtime.objectives import LinkPrediction, NodeClassification, Objective
from graphtier.launcher.runtime.reporter import ProgressReporter
from graphtier.launcher.runtime.session import TrainSession
from graphtier.launcher.runtime.train_config import TrainConfig, TrainResult
from graphtier.launcher.runtime.train_loop import train
from graphtier.launcher.runtime.typed_batches import TypedLocalBatches, typed_forward
from graphtier.launcher.runtime.typed_link import (
    TypedLinkBatches,
    TypedLinkModel,
    evaluate_typed_links,
    typed_pair_forward,
)
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling.subgraph import Block
from graphtier.service.store import AttachedDataset, attach_dataset

TYPED_EVAL_BATCH_SIZE = 1024  # the fewest seeds per evaluation batch of a typed job (few passes, same figures)

__all__ = ["Batch", "Block", "DatasetInfo", "Job", "connect"]


@dataclass(frozen=True)
class DatasetInfo:
    """What a script needs to size its model and read its data."""

    name: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    split_sizes: dict[str, int]  # train/val/test -> number of ids
    fanouts: list[int]  # neighbours per hop of this job's sampler (hops = model layers)
    batch_size: int  # seed nodes per batch per rank
    steps_per_epoch: int  # batches per epoch on every rank
    hetero: HeteroSchema | None = None  # a typed dataset's node types, relations and target type; None: one type


class Job:
    """One torchrun rank's side of a job; made by `connect()`, closed by `with` or `close()`."""

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
            handle = client.dataset_layout(spec.dataset, job_id=job_id).handle
            self.data: AttachedDataset = attach_dataset(handle, storage_reads=spec.storage_reads)
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
        self.typed = self.data.typed  # heterogeneous batches: per-type x, relations and node types
        self.config = TrainConfig.for_job(  # the spec's model, optimisation, checkpoints; the data's sizes
            spec,
            # a link job's encoder outputs `hidden`-wide embeddings; a featureless graph's input is a learned row
            in_dim=grant.feature_dim or spec.hidden if link or self.typed else grant.feature_dim,
            num_classes=spec.hidden if link else grant.num_classes,
            # a typed graph's featureless types have their embeddings in the typed model instead
            learned_embeddings=self.data.graph.num_nodes if link and not grant.feature_dim and not self.typed else 0,
            best_split=f"val_hits@{DEFAULT_HITS_K}" if link else "val",
            layers=len(spec.fanouts),
            checkpoint_dir=checkpoint_dir(self.job_dir),
            log_every_steps=max(1, min(10, self.channel.steps_per_epoch // 10)),
        )
        self.reporter = ProgressReporter(client, job_id, self.ctx.rank, self.channel)
        self.session = TrainSession(self.ctx, self.config, self.reporter)
        self._eval: LocalBatchSource | TypedLocalBatches | None = None
        self._typed_links: TypedLinkBatches | None = None  # a typed link job's evaluation: its embedding batches
        if self.typed:  # every neighbour, as the model would see the whole typed graph: exact at any batch size
            shard = (self.data, spec.relation_fanouts or spec.fanouts, spec.batch_size)
            shard += (self.ctx.rank, self.ctx.world_size, spec.seed)
            every = {
                "eval_fanouts": [-1] * len(spec.fanouts),
                "eval_batch_size": max(spec.batch_size, TYPED_EVAL_BATCH_SIZE),
            }
            if link:  # a typed link job evaluates from its embedding batches
                self._typed_links = TypedLinkBatches(*shard, negatives=spec.negatives, **every)
            else:
                self._eval = TypedLocalBatches(*shard, **every)
        elif not link:
            self._eval = LocalBatchSource(
                self.data, spec.fanouts, spec.batch_size, self.ctx.rank, self.ctx.world_size, spec.seed
            )
        self._epoch, self._index, self._current = 0, 0, None
        self._finished = self._closed = self._own_launch = False
        self._prepared: PreparedDataset | None = None
        # a decoder reading common-neighbour features: over the training graph, built once for training and evaluation
        self._pair_structure = (
            PairStructure(self.data.graph) if link and spec.decoder in PAIR_FEATURE_DECODERS else None
        )
        torch.manual_seed(spec.seed)  # the model a script builds next starts alike on every rank

    # Who and where

    @property
    def rank(self) -> int:
        return self.ctx.rank

    @property
    def world_size(self) -> int:
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
        """Move `model` to `device`, resume it and `optimizer` from the job's newest checkpoint
        (a restarted rank), and wrap it in DDP when there are several ranks; train what it returns."""
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
            find_unused_parameters=self.typed,  # a typed batch may leave some relations' or types' weights unused
        )

    def epochs(self) -> Iterator[int]:
        """The epochs left to train (all of them, or from the checkpoint resumed from); at the end of
        each, rank 0 checkpoints the prepared model and the epoch's figures are reported."""
        for epoch in range(self.session.position.epoch, self.spec.epochs):
            self.session.start_epoch()
            self._epoch, self._index = epoch, 0
            yield epoch
            self.session.end_epoch(epoch, self._index)

    def batches(self, epoch: int | None = None) -> Iterator[Batch]:
        """This rank's batches of `epoch` (default: the current one of `epochs()`) on `device`,
        skipping those the resumed checkpoint covers. Each is handed back to the producer when
        the next is asked for."""
        epoch = self._epoch if epoch is None else epoch
        self._epoch, skip = epoch, self.session.skip(epoch)
        for index, batch in enumerate(self.channel.batches_for_epoch(epoch)):
            if index < skip:
                batch.release()
                continue
            self._index, self._current = index + 1, on_device(batch, self.device)
            self.session.begin_step(epoch, index + 1)  # names the step if its gradients turn out non-finite
            try:
                yield self._current
            finally:
                self._current = None
                batch.release()
        self.session.end_batches()  # an evaluation in the epoch's body is not counted as training

    def step(self, loss: Tensor | float, logits: Tensor | None = None) -> None:
        """Count one optimizer step on the current batch: its loss and, given the model's `logits`
        (the seeds' rows first), its training accuracy. Reports progress and checkpoints when due."""
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

    def source_ids(self, ids: Tensor) -> Tensor:
        """The source's ids of this job's node ids `ids` (a batch's `node_ids`, a split's ids; graphtier's are
        hotness ranks): predictions and embeddings written with them line up with the source's files."""
        if self._prepared is None:
            endpoints = read_endpoints(self.client.runtime_dir)
            if endpoints is None:
                raise GraphtierError(f"no daemon at {self.client.runtime_dir} to say where {self.spec.dataset!r} lives")
            self._prepared = PreparedDataset.open(self.spec.dataset, Path(endpoints.dataset_root))
        return self._prepared.source_ids(ids)

    def split_ids(self, split: str) -> Tensor:
        """The node ids of `split` (train/val/test) in graphtier's ids; `source_ids` maps them to the source's."""
        if split not in self.data.splits:
            raise GraphtierError(
                f"dataset {self.spec.dataset!r} has no split {split!r}; it has {sorted(self.data.splits)}"
            )
        return self.data.splits[split]

    def evaluate(
        self, model: nn.Module, splits: tuple[str, ...] = ("val", "test"), forward: Forward | None = None
    ) -> dict[str, float]:
        """Accuracy on each split over all ranks (every rank must call it), on `device`, reported
        to the daemon as the job's latest val/test accuracy, and as its best (`result.best`) when the
        val accuracy is the highest so far. `forward(model, batch)` computes the
        logits (default `model(batch.blocks, batch.x)`; e.g. `lambda m, b: m(b.x, b.edge_index)`)."""
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
        if forward is None and self.typed:
            forward = typed_forward
        return self.session.evaluate(self._epoch, self._index, self._eval.eval_batches, model, forward, tuple(splits))

    def fit(self, model: nn.Module | None = None) -> TrainResult:
        """The built-in loop over this job: Adam, cross-entropy, evaluation every epoch, checkpoints,
        resume. `model` takes `(blocks, x)` (on a heterogeneous job `(blocks, edge_types, node_ids,
        node_types, x)` with `x` per node type, as R-GCN and HGT do); None builds the spec's built-in
        `model`. A link job builds its own."""
        if model is not None and self.spec.task == "link":
            raise GraphtierError("job.fit(model) trains node classification; a link job builds its own model")
        result = train(
            self.channel.batches_for_epoch, self._objective(model), self.config, self.reporter, even_batches=True
        )
        self._finished = True
        return result

    def _objective(self, model: nn.Module | None) -> Objective:
        """What `fit` optimises: the job's task, over its typed or untyped model."""
        spec = self.spec
        if self._typed_links is not None:
            # the spec's rgcn or hgt encoder and its decoder on the target relation's pairs, evaluated with every
            # node of the head and tail types embedded over its whole neighbourhood
            loader = self._typed_links
            encoder = TypedLinkModel(
                loader.schema,
                spec.hidden,
                len(spec.fanouts),
                model=spec.model,
                decoder=spec.decoder,
                dropout=spec.dropout,
                heads=spec.heads,
            )
            return LinkPrediction(
                lambda module, _ctx, _embeddings: evaluate_typed_links(module, loader),
                model=encoder,
                forward=typed_pair_forward,
            )
        if self._eval is None:
            return LinkPrediction(self._evaluate_links, structure=self._pair_structure)
        if not self.typed:
            return NodeClassification(self._eval.eval_batches, model)
        schema = self.data.handle.hetero
        assert schema is not None
        if model is None:
            model = build_typed_model(
                spec.model, schema, spec.hidden, self.dataset.num_classes, len(spec.fanouts), spec.dropout, spec.heads
            )
        return NodeClassification(self._eval.eval_batches, model, typed_forward)

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

    # The end

    def close(self, error: BaseException | None = None) -> None:
        """Report the end (when the script did not fail), give the channel back, leave the group."""
        if self._closed:
            return
        self._closed = True
        if error is not None and self._own_launch:  # no rank_main around it to tell the daemon why
            write_rank_failure(self.job_dir, self.rank, error)
        try:
            if error is None and not self._finished:
                self.session.finish(self._epoch + 1)
            self.channel.close("" if error is None else f"{type(error).__name__}: {error}")
        finally:
            self.data.detach()
            self.ctx.shutdown()
            self.client.close()

    def close_at_exit(self) -> None:
        """For a job this script registered: close it when the interpreter exits, failed by an exception
        that ends the script, so a script without `with` still ends its job."""
        self._own_launch = True
        previous_hook = sys.excepthook

        def record(exc_type: type[BaseException], exc: BaseException, tb: object) -> None:
            self.close(exc)
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
        fanout = values.pop("fanout")
        if isinstance(fanout, str):
            try:
                fanout = [int(part) for part in fanout.split(",")]
            except ValueError:
                raise GraphtierError(f"graphtier.connect(): fanout {fanout!r} is not a list such as 15,10,5") from None
        values["fanouts"] = fanout
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
    """This rank's side of its job.

    Inside a job the daemon started (`job submit --script`: GRAPHTIER_JOB_ID is set) that job, whose
    submitted spec decides; `dataset`, when given, must be its dataset. Otherwise -- a script launched
    by `torchrun --nproc-per-node N train.py`, by torchrun on several machines, or by plain
    `python train.py` -- `dataset` and the job's other fields in `spec` register a job with this
    machine's daemon: the node's first rank makes it, the launch's other ranks join it (by torchrun's
    run id, master address and agent), the daemon starts one producer per rank, and the job ends when
    the ranks close it -- or fails when they die.

    `spec` takes `JobSpec`'s fields by name (`batch_size`, `epochs`, `lr`, ...; `spec_keywords()` lists
    them) and `fanout` as the command line's --fanout ("15,10,5"); a keyword that is none of them is
    refused naming the ones there are.

    `priority` (a job this script registers): "job" runs this rank as the daemon runs the ranks it
    starts -- 5 more nice than the daemon, SCHED_BATCH -- so the daemon's control plane answers first
    when cores are short, and the rank's producer runs at the same priority; "inherit" keeps the
    launch's priority, and the producer then runs at the daemon's. Niceness only ever rises: a
    process cannot lower it back unprivileged."""
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
        job.close_at_exit()
    return job
