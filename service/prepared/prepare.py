"""The preparation pipeline: read a source, build CSC, score, reorder, write atomically.

Two paths give the same bytes. Under a memory budget (the default: half of the machine's
memory) the out-of-core path (`out_of_core.py`) streams every step through spill files in
the dataset's temporary directory; with `memory_budget="unlimited"` the in-memory path
below holds the whole graph and its features (about 3x the dataset's bytes at its peak).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from graphtier.service.graph.csc import build_csc
from graphtier.service.graph.graph_data import SPLIT_NAMES, GraphData
from graphtier.service.hotness import ScoreSpec, compute_scores, reorder_by_score
from graphtier.service.prepared.out_of_core.memory_budget import MemoryPlan, parse_memory_budget
from graphtier.service.prepared.catalog import DatasetWriter, default_dataset_root, validate_name
from graphtier.service.prepared.huge_pages import numpy_huge_pages_for_preparation
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
    memory_budget: str | int = Field(
        "auto", description="peak memory allowed: a size ('3GiB'), a share of memory ('40%'), 'auto' (half of "
        "the machine's memory) or 'unlimited' (the in-memory path)"
    )
    work_bytes: int | None = Field(
        None, ge=1, description="out-of-core working memory, bypassing the measurement (tests use it to force many chunks)"
    )


class StepClock:
    """Times named steps and tells an optional observer (the CLI's progress display)."""

    def __init__(self, observer: StepCallback | None = None) -> None:
        self.observer = observer
        self.timings: dict[str, float] = {}
        self.peaks: dict[str, int] = {}  # peak RSS so far, at the end of each step
        self.cpu: dict[str, float] = {}  # CPU seconds (user + system, all threads) of each step

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        if self.observer:
            self.observer(name, "start")
        start, cpu = time.perf_counter(), time.process_time()
        yield
        self.timings[name] = round(time.perf_counter() - start, 3)
        self.cpu[name] = round(time.process_time() - cpu, 3)
        self.peaks[name] = peak_rss_bytes()
        if self.observer:
            self.observer(name, "done")


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far: its VmHWM.

    Not `getrusage().ru_maxrss`: Linux carries the high-water mark of the address space a
    process replaced into it at exec, so a prepare started by a large parent (a test run at
    600 MiB, a daemon) would report the parent's peak as its own.
    """
    with contextlib.suppress(OSError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # other systems: KiB on Linux, close enough


@dataclass
class PreparedContent:
    """What either path found out about the graph it wrote, for the manifest."""

    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    split_sizes: dict[str, int]
    description: dict[str, object]
    details: dict[str, object] = field(default_factory=dict)
    class_labels: list[int] | None = None
    notes: list[str] = field(default_factory=list)


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
    import graphtier.service.sources  # noqa: F401
    from graphtier.service.prepared.out_of_core.pipeline import prepare_out_of_core

    writer = DatasetWriter(root, config.name, overwrite=config.overwrite)  # fails early on an existing name
    with writer, numpy_huge_pages_for_preparation() as huge_pages:
        if budget is None:
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
            score={**config.score.model_dump(), "label": config.score.label()},
            arrays=dict(writer.arrays),
            timings_s=dict(clock.timings),
            peak_rss_bytes=peak_rss_bytes(),
            memory_budget_bytes=budget,
            preparation={
                "path": "in-memory" if budget is None else "out-of-core",
                "peak_rss_after_step_bytes": dict(clock.peaks),
                "cpu_s_by_step": dict(clock.cpu),
                "huge_pages": huge_pages,
                **content.details,
            },
            notes=content.notes,
        )
        writer.commit(manifest)
    return manifest


def split_sizes(splits: dict[str, torch.Tensor]) -> dict[str, int]:
    return {split: int(splits[split].numel()) if split in splits else 0 for split in SPLIT_NAMES}


def _prepare_in_memory(config: PrepareConfig, writer: DatasetWriter, clock: StepClock) -> PreparedContent:
    """The unbounded path: the whole edge list, CSC and features in memory."""
    with clock.step("read source"):
        data = load_graph(config)
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
        write_node_arrays(writer, data.labels, data.splits, reordering.new_to_old, reordering.old_to_new, scores,
                          data.original_ids)
    return PreparedContent(
        num_nodes=reordering.graph.num_nodes,
        num_edges=reordering.graph.num_edges,
        feature_dim=0 if data.features is None else int(data.features.shape[1]),
        num_classes=data.num_classes,
        split_sizes=split_sizes(data.splits),
        description=data.description,
        class_labels=data.class_labels,
        notes=data.notes,
    )


def write_node_arrays(
    writer: DatasetWriter,
    labels: torch.Tensor | None,
    splits: dict[str, torch.Tensor],
    new_to_old: torch.Tensor,
    old_to_new: torch.Tensor,
    scores: torch.Tensor,
    original_ids: torch.Tensor | None,
) -> None:
    """The per-node arrays, in the reordered id space (the same for both paths)."""
    # index_select rather than t[idx] for the N-sized gathers: the same values, several times faster
    if labels is not None:
        writer.write("labels", torch.index_select(labels, 0, new_to_old))
    for split in SPLIT_NAMES:
        ids = splits.get(split, torch.empty(0, dtype=torch.int64))
        writer.write(f"{split}_ids", old_to_new[ids].sort().values)
    writer.write("new_to_old", new_to_old)
    writer.write("old_to_new", old_to_new)
    writer.write("scores", torch.index_select(scores, 0, new_to_old))
    if original_ids is not None:
        writer.write("original_ids", original_ids)
