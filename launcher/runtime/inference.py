"""An inference job's rank: a trained job's model applied layer by layer to every node (or an id file's).

`graphtier job predict ID` (or `job submit --from-job ID`) starts one of these per rank, under
torchrun, without producers. Each rank

1. attaches the dataset copy the job was given and rebuilds the trained model (`trained_model.py`),
   split into its layers (`layerwise_models.py`);
2. computes its shard of every layer over full neighbourhoods (`layerwise.py`: layer 0's features
   through the tiers, counted per tier and reported as a producer's gathers are; later layers from
   the previous layer's rows, shared with the machine's other ranks in mapped files), resuming at
   the first layer a restarted attempt had not completed, reporting its progress per chunk
   (`Phase.INFER`: the epoch is the layer);
3. writes its shard of the output in the source's ids (`inference_output.py`): embeddings (the
   last hidden layer, or with `embeddings: last-input` what the last layer's linear maps read:
   `layerwise_models.py`) of every node type the layer computes, logits and predicted classes of a classifier; rank 0
   then writes the manifest and reports, as the job's result, the accuracy of the predictions on
   the val and test splits (a node classifier) or the link metrics of the embeddings (a link model)
   when every node was computed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch
from torch import Tensor

from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.errors import DaemonError, GraphtierError
from graphtier.contract.inference import EmbeddingsInfo, PredictionManifest, TrainedModelInfo
from graphtier.contract.jobs.directory import job_directory, layer_rows_dir, predictions_dir
from graphtier.contract.jobs.progress import Phase, ProducerFigures, ProgressReport, TrainerFigures
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.inference_output import (
    OutputRows,
    group_info,
    output_groups,
    write_manifest,
    write_shard,
)
from graphtier.launcher.runtime.layerwise import LayerRows, LayerwisePlan, LayerwiseProgress, layerwise
from graphtier.launcher.runtime.layerwise_models import LayerSteps, in_row_chunks, layer_steps
from graphtier.launcher.runtime.link_eval import link_metrics
from graphtier.launcher.runtime.link_model import LinkModel
from graphtier.launcher.runtime.models.rgat import RGAT
from graphtier.launcher.runtime.models.rgcn import RGCN
from graphtier.launcher.runtime.trained_model import TrainedModel, load_trained_model
from graphtier.service.graph.common_neighbours import PairStructure
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.digests import dataset_version
from graphtier.service.store import AttachedDataset, attach_dataset

REPORT_EVERY_S = 1.0


class InferenceReporter:
    """A rank's layer-wise progress -> ProgressReports: a trainer's (Phase.INFER, the epoch the layer, steps
    its chunks) and, for layer 0's gathers through the tiers, a producer's (traffic by tier)."""

    def __init__(self, client: DataPlaneClient, job_id: str, rank: int) -> None:
        self.client, self.job_id, self.rank = client, job_id, rank
        self._last = 0.0
        self._warned = False

    def _send(self, figures: TrainerFigures | ProducerFigures) -> None:
        report = ProgressReport(self.job_id, self.rank, os.getpid(), datetime.now(timezone.utc), figures)
        try:
            self.client.report_progress(report)
        except DaemonError as exc:
            if not self._warned:
                print(f"cannot report progress: {exc}", flush=True)
                self._warned = True

    def __call__(
        self, progress: LayerwiseProgress, *, done: bool = False, results: dict[str, float] | None = None
    ) -> None:
        now = time.perf_counter()
        final_layer_chunk = progress.chunks_done == progress.chunks_in_layer
        if not done and not final_layer_chunk and now - self._last < REPORT_EVERY_S:
            return
        self._last = now
        elapsed = now - progress.started
        results = results or {}
        self._send(
            ProducerFigures(
                epoch=progress.layer,
                batches_total=progress.gathered_chunks,
                seeds_total=0,
                sampled_nodes_total=progress.sampled_nodes,
                sampled_edges_total=progress.sampled_edges,
                sample_seconds_total=progress.sample_s,
                gather_seconds_total=progress.gather_s,
                traffic=progress.traffic,
            )
        )
        self._send(
            TrainerFigures(
                phase=Phase.DONE if done else Phase.INFER,
                epoch=progress.layer,
                step_in_epoch=progress.chunks_done,
                global_step=progress.steps_done,
                batches_per_second=progress.steps_done / elapsed if elapsed > 0 else 0.0,
                train_seconds_total=elapsed,
                steps_total=progress.steps_done,
                val_accuracy=results.get("val"),
                test_accuracy=results.get("test"),
                eval_metrics={k: v for k, v in results.items() if k not in ("val", "test")},
                steps_per_epoch=progress.chunks_in_layer,
                total_steps=progress.total_steps,
            )
        )


def _prepared(client: DataPlaneClient, spec: JobSpec, data: AttachedDataset) -> PreparedDataset:
    """The prepared dataset behind the job's copy: where its id maps live."""
    endpoints = read_endpoints(client.runtime_dir)
    if endpoints is None:
        raise GraphtierError(f"no daemon at {client.runtime_dir} to say where {spec.dataset!r} lives")
    prepared = PreparedDataset.open(spec.dataset, Path(endpoints.dataset_root))
    if prepared.manifest.num_nodes != data.graph.num_nodes:
        raise GraphtierError(
            f"dataset {spec.dataset!r} was prepared again since it was loaded ({prepared.manifest.num_nodes} nodes "
            f"on disk, {data.graph.num_nodes} loaded): its ids no longer line up; unload it and run again"
        )
    return prepared


def _plan(
    data: AttachedDataset, trained: TrainedModel, steps: LayerSteps, groups: list[OutputRows], every_node: bool
) -> LayerwisePlan:
    """What each layer computes: every node, or the receptive field of the id file's nodes; an R-GCN or
    R-GAT classifier's last layer only for its target type (its other layers whole, for every type's embeddings)."""
    layers = len(steps.widths)
    if not every_node:
        return LayerwisePlan(data.graph, layers, torch.cat([g.nodes for g in groups]))
    schema = data.handle.hetero
    if schema is not None and isinstance(trained.module, RGCN | RGAT):
        target = schema.type_named(schema.target_type)
        return LayerwisePlan(
            data.graph, layers, torch.arange(target.offset, target.offset + target.count), last_only=True
        )
    return LayerwisePlan(data.graph, layers)


def _arrays(
    steps: LayerSteps,
    rows: LayerRows,
    group: str,
    target_type: str | None,
    class_labels: Tensor | None,
    device,
    *,
    last_layer_target_only: bool,
) -> Callable[[Tensor], dict[str, Tensor]]:
    """What a group's shard holds for graphtier ids `nodes`: embeddings (where their layer was computed for the
    group: `last_layer_target_only` says the last layer was for the target type only) and, of a classifier's
    labelled type, logits and predictions."""
    last = len(steps.widths) - 1
    classifies = steps.logits is not None and (target_type is None or group == target_type)
    embeds = steps.embedding_layer is not None and (
        steps.embedding_layer < last or not last_layer_target_only or group == target_type
    )

    def arrays(nodes: Tensor) -> dict[str, Tensor]:
        out = {}
        if embeds:
            assert steps.embedding_layer is not None
            layer = steps.embedding_layer
            embedded = rows.rows(layer, steps.widths[layer]).index_select(0, nodes)
            head = steps.embedding_head
            out["embeddings"] = in_row_chunks(head, embedded, device) if head is not None else embedded
        if classifies:
            assert steps.logits is not None
            logits = in_row_chunks(steps.logits, rows.rows(last, steps.widths[last]).index_select(0, nodes), device)
            classes = logits.argmax(dim=1) if logits.numel() else torch.empty(0, dtype=torch.int64)
            out["logits"] = logits
            out["predictions"] = class_labels[classes] if class_labels is not None else classes
        return out

    return arrays


@torch.no_grad()
def _results(
    data: AttachedDataset, trained: TrainedModel, steps: LayerSteps, rows: LayerRows, device: torch.device
) -> dict[str, float]:
    """The job's figures from the computed rows: the accuracy of the predictions on the val and test
    splits (a classifier), or a link model's link metrics of its embeddings."""
    last = len(steps.widths) - 1
    module = trained.module
    if isinstance(module, LinkModel):
        z = rows.rows(last, steps.widths[last]).to(device)
        structure = PairStructure(data.graph) if module.reads_pair_features else None
        return link_metrics(module, z, data, ("val", "test"), structure=structure)
    if steps.logits is None or data.labels is None:
        return {}
    results = {}
    for split in ("val", "test"):
        ids = data.splits.get(split)
        if ids is None or ids.numel() == 0:
            continue
        logits = in_row_chunks(steps.logits, rows.rows(last, steps.widths[last]).index_select(0, ids), device)
        labels = data.labels.index_select(0, ids)
        labelled = labels >= 0
        if bool(labelled.any()):
            results[split] = float((logits.argmax(dim=1) == labels)[labelled].double().mean())
    return results


def run_inference(job_id: str, runtime_dir: Path) -> None:
    """This rank's part of inference job `job_id` (module docstring)."""
    client = DataPlaneClient(runtime_dir=runtime_dir)
    try:
        spec = client.get_job(job_id).spec
        ctx = DistContext.from_env(spec.device)
        try:
            handle = client.dataset_layout(spec.dataset, job_id=job_id).handle
            data = attach_dataset(handle, storage_reads=spec.storage_reads)
            try:
                _infer(client, job_id, Path(runtime_dir), spec, ctx, data)
            finally:
                data.detach()
        finally:
            ctx.shutdown()
    finally:
        client.close()


def _infer(
    client: DataPlaneClient, job_id: str, runtime_dir: Path, spec: JobSpec, ctx: DistContext, data: AttachedDataset
) -> None:
    started = time.perf_counter()
    job_dir = job_directory(runtime_dir, job_id)
    schema = data.handle.hetero
    trained = load_trained_model(job_directory(runtime_dir, spec.from_job), ctx.device)
    steps = layer_steps(trained, spec.embeddings)
    prepared = _prepared(client, spec, data)
    version = dataset_version(prepared.directory) or ""
    if trained.dataset_version is not None and trained.dataset_version != version:
        raise GraphtierError(
            f"job {spec.from_job} trained on version {trained.dataset_version[:16]} of dataset {spec.dataset!r}, "
            f"which was prepared again since (now {version[:16]}): its ids no longer line up"
        )
    ids_file = Path(spec.ids) if spec.ids else None
    groups = output_groups(prepared, schema, ids_file)
    every_node = ids_file is None
    plan = _plan(data, trained, steps, groups, every_node)
    # a restarted attempt resumes from the layers of the same weights over the same nodes, the same last layer
    key = f"{trained.sha256}:{spec.ids}:{spec.embeddings}"
    rows = LayerRows(layer_rows_dir(job_dir), data.graph.num_nodes, ctx, key=key)
    reporter = InferenceReporter(client, job_id, ctx.rank)
    if ctx.rank == 0:
        where = "every node" if every_node else f"{sum(g.nodes.numel() for g in groups)} node(s) of {ids_file}"
        print(
            f"inference of job {spec.from_job}'s {trained.spec.model} (weights of epoch {trained.epoch}) "
            f"over {where}: {len(steps.widths)} layer(s) of widths {steps.widths}, {ctx.world_size} rank(s); "
            f"embeddings: {spec.embeddings}",
            flush=True,
        )
    first = rows.first_incomplete(steps.widths)
    if first and ctx.rank == 0:
        print(f"layer {first - 1} was completed by an earlier attempt: resuming at layer {first}", flush=True)
    last_progress = LayerwiseProgress()

    def on_chunk(progress: LayerwiseProgress) -> None:
        nonlocal last_progress
        last_progress = progress
        reporter(progress)
        if progress.chunks_done == progress.chunks_in_layer and progress.chunks_in_layer and ctx.rank == 0:
            took = time.perf_counter() - started
            print(f"layer {progress.layer} computed: {plan.count(progress.layer)} rows, {took:.1f} s", flush=True)

    chunks = layerwise(
        data,
        steps.widths,
        ctx,
        rows,
        plan,
        chunk_size=spec.batch_size,
        input_rows=steps.input_rows,
        on_chunk=on_chunk,
        keep={len(steps.widths) - 1, *([steps.embedding_layer] if steps.embedding_layer is not None else [])},
    )
    with torch.no_grad():
        for chunk in chunks:
            chunk.write(steps.layer(chunk))
    out = predictions_dir(job_dir)
    labels = torch.tensor(data.handle.class_labels, dtype=torch.int64) if data.handle.class_labels else None
    target_type = schema.target_type if schema is not None else None
    last_layer_target_only = every_node and plan.destinations(len(steps.widths) - 1) is not None
    columns = {}
    for group in groups:
        arrays = _arrays(
            steps, rows, group.group, target_type, labels, ctx.device, last_layer_target_only=last_layer_target_only
        )
        columns[group.group] = write_shard(out, group, arrays, ctx.rank, ctx.world_size)
    ctx.barrier()
    results = _results(data, trained, steps, rows, ctx.device) if every_node and ctx.rank == 0 else {}
    widths = [c["embeddings"][1][0] for c in columns.values() if "embeddings" in c]  # (dtype, [width])
    if ctx.rank == 0:
        manifest = PredictionManifest(
            job_id=job_id,
            dataset=spec.dataset,
            dataset_version=version,
            trained=TrainedModelInfo(
                job_id=spec.from_job,
                model=trained.spec.model,
                task=trained.spec.task,
                layers=len(steps.widths),
                hidden=trained.config.hidden,
                epoch=trained.epoch,
                file=str(trained.file),
                sha256=trained.sha256,
            ),
            rows="every node" if every_node else str(ids_file),
            groups={g.group: group_info(g, columns[g.group], ctx.world_size) for g in groups},
            class_labels=list(data.handle.class_labels) if data.handle.class_labels else None,
            embeddings=EmbeddingsInfo(kind=spec.embeddings, width=widths[0]) if widths else None,
            seconds=time.perf_counter() - started,
        )
        path = write_manifest(out, manifest)
        figures = ", ".join(f"{k} {v:.4f}" for k, v in results.items())
        print(f"wrote {path} in {manifest.seconds:.1f} s" + (f"; {figures}" if figures else ""), flush=True)
    rows.remove()
    reporter(last_progress, done=True, results=results)
