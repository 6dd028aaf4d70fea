"""A graph read in chunks: what the out-of-core preparation consumes instead of a `GraphData`.

Edges and feature rows are re-iterable chunk streams, held either in memory (a source that
loads whole, wrapped by `StreamedGraph.from_graph_data`) or in spill files on disk (the
streamed synthetic generator). Per-node arrays (labels, splits, original ids) stay tensors:
the out-of-core path keeps O(N) in memory and streams everything O(E) or O(N x F).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch
from numpy.typing import DTypeLike

from graphtier.service.graph.graph_data import GraphData


class ChunkFile(Protocol):
    """A file of rows readable by range (`out_of_core.spill.SpillArray`)."""

    num_rows: int
    dtype: np.dtype

    def read(self, start: int, stop: int, buffer: np.ndarray | None = None) -> np.ndarray:
        """Rows [start, stop): a view, or read into the front of `buffer` when the file is on disk."""
        ...

    def delete(self) -> None: ...


class TensorEdges:
    """Edges held in memory, handed out in slices."""

    def __init__(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.src, self.dst = src, dst

    @property
    def num_edges(self) -> int:
        return self.src.numel()

    def chunks(self, max_edges: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, self.num_edges, max(1, max_edges)):
            yield self.src[start : start + max_edges], self.dst[start : start + max_edges]

    def release(self) -> None:
        self.src = self.dst = torch.empty(0, dtype=torch.int64)


class FileEdges:
    """Edges in two id files (any integer dtype), optionally relabelled by a node map on the way out."""

    def __init__(self, src: ChunkFile, dst: ChunkFile, relabel: torch.Tensor | None = None) -> None:
        self.src, self.dst, self.relabel = src, dst, relabel

    @property
    def num_edges(self) -> int:
        return self.src.num_rows

    def chunks(self, max_edges: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for start in range(0, self.num_edges, max(1, max_edges)):
            ends = []
            for file in (self.src, self.dst):
                ids = torch.from_numpy(file.read(start, start + max_edges))
                # index_select (int32 ids index directly), not relabel[ids]: the same values, several times faster
                ends.append(ids.to(torch.int64) if self.relabel is None else torch.index_select(self.relabel, 0, ids))
            yield ends[0], ends[1]

    def raw_chunks(self, max_edges: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The ids as stored, before `relabel` (for a caller that relabels as it goes, or counts by
        stored id). Files on disk are read into two buffers reused for every chunk: use each chunk
        before asking for the next."""
        step = max(1, max_edges)
        # np.empty: a file in memory returns views and never touches its buffer's pages
        buffers = [np.empty(min(step, self.num_edges), file.dtype) for file in (self.src, self.dst)]
        for start in range(0, self.num_edges, step):
            yield self.src.read(start, start + step, buffers[0]), self.dst.read(start, start + step, buffers[1])

    def release(self) -> None:
        self.src.delete()
        self.dst.delete()


class FeatureRows(Protocol):
    """Node rows (features) walked chunk by chunk: `TensorRows`, `FileRows`, or rows drawn as they are walked."""

    @property
    def num_rows(self) -> int: ...

    @property
    def row_shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def chunks(self, max_rows: int) -> Iterator[tuple[int, torch.Tensor]]: ...

    def release(self) -> None: ...


class TensorRows:
    """Node rows (features) held in memory."""

    def __init__(self, rows: torch.Tensor) -> None:
        self.rows = rows
        self.num_rows, self.row_shape, self.dtype = rows.shape[0], tuple(rows.shape[1:]), rows.numpy().dtype

    def chunks(self, max_rows: int) -> Iterator[tuple[int, torch.Tensor]]:
        for start in range(0, self.num_rows, max(1, max_rows)):
            yield start, self.rows[start : start + max_rows]

    def release(self) -> None:
        self.rows = torch.empty(0)


class FileRows:
    """Node rows in a spill file, in source order."""

    def __init__(self, file: ChunkFile, row_shape: tuple[int, ...], dtype: DTypeLike) -> None:
        self.file, self.row_shape, self.dtype = file, tuple(row_shape), np.dtype(dtype)

    @property
    def num_rows(self) -> int:
        return self.file.num_rows

    def chunks(self, max_rows: int) -> Iterator[tuple[int, torch.Tensor]]:
        for start in range(0, self.num_rows, max(1, max_rows)):
            yield start, torch.from_numpy(self.file.read(start, start + max_rows))

    def release(self) -> None:
        self.file.delete()


@dataclass
class StreamedGraph:
    """`GraphData` with its edges and features as chunk streams (see the module docstring)."""

    num_nodes: int
    edges: TensorEdges | FileEdges
    features: FeatureRows | None = None
    labels: torch.Tensor | None = None
    splits: dict[str, torch.Tensor] = field(default_factory=dict)
    original_ids: torch.Tensor | None = None
    origin: str = ""
    description: dict[str, object] = field(default_factory=dict)
    details: dict[str, object] = field(
        default_factory=dict
    )  # how it was read (what stayed in memory), for the manifest
    class_count: int | None = None  # as GraphData's
    class_labels: list[int] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def feature_dim(self) -> int:
        return 0 if self.features is None else int(np.prod(self.features.row_shape, dtype=np.int64))

    @property
    def num_classes(self) -> int:
        if self.labels is None or self.labels.numel() == 0:
            return 0
        if self.class_count is not None:
            return self.class_count
        return int(self.labels.max().item()) + 1

    @classmethod
    def from_graph_data(cls, data: GraphData) -> StreamedGraph:
        """Wrap a graph a source loaded whole; the wrapper takes over its tensors."""
        return cls(
            num_nodes=data.num_nodes,
            edges=TensorEdges(data.src, data.dst),
            features=None if data.features is None else TensorRows(data.features),
            labels=data.labels,
            splits=dict(data.splits),
            original_ids=data.original_ids,
            origin=data.origin,
            description=dict(data.description),
            class_count=data.class_count,
            class_labels=data.class_labels,
            notes=list(data.notes),
        )
