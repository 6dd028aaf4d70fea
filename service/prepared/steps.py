"""What both preparation paths share: the request, the step clock, the content found, the node arrays.

`prepare.py` runs the in-memory path and `out_of_core.py` the bounded one; each reports what
it wrote as `PreparedContent` and writes the per-node arrays the same way, timed by one
`StepClock`.
"""

from __future__ import annotations

import contextlib
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from graphtier.service.graph.graph_data import SPLIT_NAMES
from graphtier.service.hotness import ScoreSpec
from graphtier.service.prepared.catalog import DatasetWriter
from graphtier.service.prepared.edge_split import EdgeSplitSpec

StepCallback = Callable[[str, str], None]  # (step name, "start" | "done")


class PrepareConfig(BaseModel):
    """What `graphtier dataset prepare` was asked to do."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="synthetic:rmat | planetoid:DIR | npz:FILE | edges:FILE | ogb:DIR | geomgcn:DIR")
    name: str
    score: ScoreSpec = Field(default_factory=ScoreSpec)
    undirected: bool = Field(False, description="add the reverse of every edge")
    source_options: dict[str, object] = Field(default_factory=dict)
    root: Path | None = Field(None, description="dataset root; default $GRAPHTIER_HOME/datasets")
    overwrite: bool = False
    group: str | None = Field(
        None,
        description="a Unix group that may read the dataset (directory 0750, files 0640); None: its owner only "
        "(0700, 0600)",
    )
    memory_budget: str | int = Field(
        "auto",
        description="peak memory allowed: a size ('3GiB'), a share of memory ('40%'), 'auto' (half of "
        "the machine's memory) or 'unlimited' (the in-memory path)",
    )
    edge_split: EdgeSplitSpec | None = Field(
        None, description="link prediction: cut the edges into train/val/test pairs (val and test leave the graph)"
    )
    work_bytes: int | None = Field(
        None,
        ge=1,
        description="out-of-core working memory, bypassing the measurement (tests use it to force many chunks)",
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
    link_split: dict[str, object] | None = None


def split_sizes(splits: dict[str, torch.Tensor]) -> dict[str, int]:
    return {split: int(splits[split].numel()) if split in splits else 0 for split in SPLIT_NAMES}


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
