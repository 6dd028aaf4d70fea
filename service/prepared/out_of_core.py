"""Preparation under a memory budget: every O(E) and O(N x F) step streamed through spill files.

The steps of the in-memory path, each bounded by the `MemoryPlan`'s working memory:
read the source as chunk streams (the synthetic generator draws in chunks into spill
files), build the CSC by an on-disk counting sort (`external_sort`), iterate the scores
over the on-disk CSC a column range at a time, then apply the permutation to structure and
features by bucketed scatter (`external_permute`), writing the dataset's files front to
back. Only per-node arrays (O(N)) are ever whole in memory; the result is byte-identical to
the in-memory path. Spill files live in `spill/` inside the dataset's temporary directory
and are removed before the dataset is committed; an interrupt removes them with it.
"""

from __future__ import annotations

import shutil

from graphtier.service.hotness import compute_scores
from graphtier.service.hotness.reorder import hotness_permutation
from graphtier.service.out_of_core.external_sort import build_csc_external
from graphtier.service.out_of_core.memory_budget import MemoryPlan
from graphtier.service.prepared.catalog import DatasetWriter
from graphtier.service.prepared.external_permute import new_colptr, permute_rows, permute_structure
from graphtier.service.prepared.steps import (
    PrepareConfig,
    PreparedContent,
    StepClock,
    split_sizes,
    write_node_arrays,
)
from graphtier.service.sources import synthetic_stream  # noqa: F401  (imported before any spill file exists)
from graphtier.service.sources.registry import load_source_stream
from graphtier.service.storage.row_checksums import CHECKSUM_ARRAY


def prepare_out_of_core(
    config: PrepareConfig, writer: DatasetWriter, clock: StepClock, plan: MemoryPlan
) -> PreparedContent:
    if writer.tmp is None:
        raise RuntimeError("prepare_out_of_core needs an entered DatasetWriter")
    spill = writer.tmp / "spill"
    spill.mkdir()
    details: dict[str, object] = {}
    try:
        with clock.step("read source"):
            graph = load_source_stream(config.source, spill, plan, **config.source_options)
            details["read_source"] = graph.details
        with clock.step("build CSC"):
            csc, details["build_csc"] = build_csc_external(
                graph.edges, graph.num_nodes, undirected=config.undirected, spill_dir=spill, plan=plan
            )
        with clock.step(f"score ({config.score.kind})"):
            scores = compute_scores(csc, config.score, train_ids=graph.splits.get("train"), symmetric=config.undirected)
        with clock.step("reorder"):
            new_to_old, old_to_new = hotness_permutation(scores)
            colptr = new_colptr(csc, new_to_old)
            writer.write("colptr", colptr)
            with writer.stream("row", (csc.num_edges,), "int64") as out:
                details["reorder_structure"] = permute_structure(csc, colptr, new_to_old, old_to_new, out, spill, plan)
            num_edges = csc.num_edges
            csc.release()
            del csc, colptr
        with clock.step("write arrays"):
            # the per-node arrays first: then only old_to_new is still held while the features are placed
            write_node_arrays(writer, graph.labels, graph.splits, new_to_old, old_to_new, scores, graph.original_ids)
            num_classes, sizes = graph.num_classes, split_sizes(graph.splits)
            del scores, new_to_old
            graph.labels, graph.splits, graph.original_ids = None, {}, None
            if graph.features is not None:
                shape = (graph.num_nodes, *graph.features.row_shape)
                with writer.stream("features", shape, graph.features.dtype) as out:
                    details["reorder_features"] = permute_rows(graph.features, old_to_new, out, spill, plan)
                graph.features.release()
            order = ["colptr", "row", "features", CHECKSUM_ARRAY]  # the in-memory path's manifest order
            writer.arrays = {k: writer.arrays[k] for k in order if k in writer.arrays} | writer.arrays
    finally:
        shutil.rmtree(spill, ignore_errors=True)
    details["memory_plan"] = plan.describe()
    return PreparedContent(
        num_nodes=graph.num_nodes,
        num_edges=num_edges,
        feature_dim=graph.feature_dim,
        num_classes=num_classes,
        split_sizes=sizes,
        description=graph.description,
        details=details,
        class_labels=graph.class_labels,
        notes=graph.notes,
    )
