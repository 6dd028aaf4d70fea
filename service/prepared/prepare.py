"""The preparation pipeline: read a source, build CSC, score, reorder, write atomically.

Two paths give the same bytes. Under a memory budget (the default: half of the machine's
memory) the out-of-core path (`out_of_core.py`) streams every step through spill files in
the dataset's temporary directory; with `memory_budget="unlimited"` the in-memory path
below holds the whole graph and its features (about 3x the dataset's bytes at its peak).
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import torch

from graphtier.contract.endpoints import default_dataset_root
from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.graph.csc import build_csc
from graphtier.service.graph.graph_data import GraphData
from graphtier.service.hotness import compute_scores, reorder_by_score
from graphtier.service.out_of_core.memory_budget import MemoryPlan, parse_memory_budget
from graphtier.service.prepared.catalog import DatasetWriter, validate_name
from graphtier.service.prepared.edge_split import edge_split_note, split_edges
from graphtier.service.prepared.huge_pages import numpy_huge_pages_for_preparation
from graphtier.service.prepared.manifest import DatasetManifest
from graphtier.service.prepared.steps import (
    PrepareConfig,
    PreparedContent,
    StepCallback,
    StepClock,
    peak_rss_bytes,
    split_sizes,
    write_node_arrays,
)


def load_graph(config: PrepareConfig) -> GraphData:
    from graphtier.service.sources import load_source

    return load_source(config.source, **config.source_options)


def prepare_dataset(config: PrepareConfig, *, observer: StepCallback | None = None) -> DatasetManifest:
    """Run the whole pipeline; on any error or interrupt nothing is left under the name."""
    validate_name(config.name)
    budget = parse_memory_budget(config.memory_budget)
    root = Path(config.root) if config.root else default_dataset_root()
    clock = StepClock(observer)
    started = time.perf_counter()
    # Import both paths before the temporary directory exists: an interrupt that lands inside an
    # import can make the interpreter exit by SIGINT instead of through our clean-up and status.
    import graphtier.service.sources  # noqa: F401  (imported for the reason above)
    from graphtier.service.prepared.hetero import is_hetero_source, prepare_hetero
    from graphtier.service.prepared.out_of_core import prepare_out_of_core

    hetero = is_hetero_source(config.source)
    if not hetero and config.edge_split is not None and config.edge_split.target_relation is not None:
        raise PreparedDatasetError(
            f"{config.source}: --target-relation names a relation of a heterogeneous graph; this one has one edge "
            "type, split it with --edge-split alone"
        )
    writer = DatasetWriter(
        root, config.name, overwrite=config.overwrite, group=config.group
    )  # fails early on an existing name
    schema, score_record = None, None
    with writer, numpy_huge_pages_for_preparation() as huge_pages:
        if hetero:  # heterogeneous sources are read whole: the in-memory path whatever the budget
            content, schema, score_record = prepare_hetero(config, writer, clock)
        elif budget is None or config.edge_split is not None:
            content = _prepare_in_memory(config, writer, clock)
        else:
            plan = MemoryPlan.start(budget, work_bytes=config.work_bytes)
            content = prepare_out_of_core(config, writer, clock, plan)
        clock.timings["total"] = round(time.perf_counter() - started, 3)
        manifest = DatasetManifest(
            name=config.name,
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            source=config.source,
            source_description={**content.description, "options": config.source_options},
            undirected=config.undirected,
            num_nodes=content.num_nodes,
            num_edges=content.num_edges,
            feature_dim=content.feature_dim,
            num_classes=content.num_classes,
            class_labels=content.class_labels,
            split_sizes=content.split_sizes,
            score=score_record or {**config.score.model_dump(), "label": config.score.label()},
            arrays=dict(writer.arrays),
            timings_s=dict(clock.timings),
            peak_rss_bytes=peak_rss_bytes(),
            memory_budget_bytes=None if hetero or config.edge_split is not None else budget,
            link_split=content.link_split,
            preparation={
                "path": "in-memory" if budget is None or hetero or config.edge_split is not None else "out-of-core",
                "peak_rss_after_step_bytes": dict(clock.peaks),
                "cpu_s_by_step": dict(clock.cpu),
                "huge_pages": huge_pages,
                **content.details,
            },
            notes=content.notes,
            hetero=schema,
        )
        writer.commit(manifest)
    return manifest


def _prepare_in_memory(config: PrepareConfig, writer: DatasetWriter, clock: StepClock) -> PreparedContent:
    """The unbounded path: the whole edge list, CSC and features in memory."""
    with clock.step("read source"):
        data = load_graph(config)
    link = None
    if config.edge_split is not None:
        with clock.step("split edges"):
            link = split_edges(
                data.num_nodes,
                data.src,
                data.dst,
                config.edge_split,
                undirected=config.undirected,
                origin=data.origin,
                original_ids=data.original_ids,
            )
            data.src, data.dst = link.message_edges()  # val and test edges leave the graph messages pass over
    with clock.step("build CSC"):
        graph = build_csc(data.num_nodes, data.src, data.dst, undirected=config.undirected)
        data.src = data.dst = torch.empty(0, dtype=torch.int64)  # free the edge list
    train = data.splits.get("train")
    with clock.step(f"score ({config.score.kind})"):
        scores = compute_scores(graph, config.score, train_ids=train, symmetric=config.undirected)
    with clock.step("reorder"):
        reordering = reorder_by_score(graph, scores)
        del graph
    with clock.step("write arrays"):
        writer.write("colptr", reordering.graph.colptr)
        writer.write("row", reordering.graph.row)
        if data.features is not None:
            writer.write_rows("features", data.features, reordering.new_to_old)
        write_node_arrays(
            writer, data.labels, data.splits, reordering.new_to_old, reordering.old_to_new, scores, data.original_ids
        )
        if link is not None:
            link.write(writer, reordering.old_to_new)
    notes = list(data.notes)
    link_split = None
    if link is not None and config.edge_split is not None:
        link_split = link.describe(config.edge_split, learned_embeddings=data.features is None)
        notes.append(edge_split_note(link_split, budgeted=parse_memory_budget(config.memory_budget) is not None))
    return PreparedContent(
        num_nodes=reordering.graph.num_nodes,
        num_edges=reordering.graph.num_edges,
        feature_dim=0 if data.features is None else int(data.features.shape[1]),
        num_classes=data.num_classes,
        split_sizes=split_sizes(data.splits),
        description=data.description,
        class_labels=data.class_labels,
        notes=notes,
        link_split=link_split,
    )
