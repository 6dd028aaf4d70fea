"""The preparation pipeline: read a source, build CSC, score, reorder, write atomically."""

from __future__ import annotations

import contextlib
import datetime as dt
import resource
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from graphtier.service.graph.csc import build_csc
from graphtier.service.graph.graph_data import SPLIT_NAMES, GraphData
from graphtier.service.hotness import Reordering, ScoreSpec, compute_scores, reorder_by_score
from graphtier.service.prepared.catalog import DatasetWriter, default_dataset_root, validate_name
from graphtier.service.prepared.manifest import DatasetManifest

StepCallback = Callable[[str, str], None]  # (step name, "start" | "done")


class PrepareConfig(BaseModel):
    """What `graphtier dataset prepare` was asked to do."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="synthetic:rmat | planetoid:DIR | npz:FILE | edges:FILE | ogb:DIR")
    name: str
    score: ScoreSpec = Field(default_factory=ScoreSpec)
    undirected: bool = Field(False, description="add the reverse of every edge")
    source_options: dict[str, object] = Field(default_factory=dict)
    root: Path | None = Field(None, description="dataset root; default $GRAPHTIER_HOME/datasets")
    overwrite: bool = False


class StepClock:
    """Times named steps and tells an optional observer (the CLI's progress display)."""

    def __init__(self, observer: StepCallback | None = None) -> None:
        self.observer = observer
        self.timings: dict[str, float] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        if self.observer:
            self.observer(name, "start")
        start = time.perf_counter()
        yield
        self.timings[name] = round(time.perf_counter() - start, 3)
        if self.observer:
            self.observer(name, "done")


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def load_graph(config: PrepareConfig) -> GraphData:
    from graphtier.service.sources import load_source

    return load_source(config.source, **config.source_options)


def prepare_dataset(config: PrepareConfig, *, observer: StepCallback | None = None) -> DatasetManifest:
    """Run the whole pipeline; on any error or interrupt nothing is left under the name."""
    validate_name(config.name)
    root = Path(config.root) if config.root else default_dataset_root()
    clock = StepClock(observer)
    started = time.perf_counter()
    writer = DatasetWriter(root, config.name, overwrite=config.overwrite)  # fails early on an existing name
    with clock.step("read source"):
        data = load_graph(config)
    with clock.step("build CSC"):
        graph = build_csc(data.num_nodes, data.src, data.dst, undirected=config.undirected)
        data.src = data.dst = torch.empty(0, dtype=torch.int64)  # free the edge list
    train = data.splits.get("train")
    with clock.step(f"score ({config.score.kind})"):
        scores = compute_scores(graph, config.score, train_ids=train)
    with clock.step("reorder"):
        reordering = reorder_by_score(graph, scores)
        del graph
    with writer:
        with clock.step("write arrays"):
            _write_arrays(writer, data, reordering, scores)
        clock.timings["total"] = round(time.perf_counter() - started, 3)
        manifest = DatasetManifest(
            name=config.name,
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            source=config.source,
            source_description={**data.description, "options": config.source_options},
            undirected=config.undirected,
            num_nodes=reordering.graph.num_nodes,
            num_edges=reordering.graph.num_edges,
            feature_dim=0 if data.features is None else int(data.features.shape[1]),
            num_classes=data.num_classes,
            split_sizes={split: int(data.splits[split].numel()) if split in data.splits else 0 for split in SPLIT_NAMES},
            score={**config.score.model_dump(), "label": config.score.label()},
            arrays=dict(writer.arrays),
            timings_s=dict(clock.timings),
            peak_rss_bytes=peak_rss_bytes(),
        )
        writer.commit(manifest)
    return manifest


def _write_arrays(writer: DatasetWriter, data: GraphData, reordering: Reordering, scores: torch.Tensor) -> None:
    """Every array in the reordered id space; features are permuted chunk by chunk while written."""
    old_to_new, new_to_old = reordering.old_to_new, reordering.new_to_old
    writer.write("colptr", reordering.graph.colptr)
    writer.write("row", reordering.graph.row)
    if data.features is not None:
        writer.write_rows("features", data.features, new_to_old)
    if data.labels is not None:
        writer.write("labels", data.labels[new_to_old])
    for split in SPLIT_NAMES:
        ids = data.splits.get(split, torch.empty(0, dtype=torch.int64))
        writer.write(f"{split}_ids", old_to_new[ids].sort().values)
    writer.write("new_to_old", new_to_old)
    writer.write("old_to_new", old_to_new)
    writer.write("scores", scores[new_to_old])
    if data.original_ids is not None:
        writer.write("original_ids", data.original_ids)
