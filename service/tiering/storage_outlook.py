"""The storage tier's expected traffic at a host budget, and what a look-ahead window saves.

Observed on the tiering report's replay: every sampled batch's rows past the host tier
(ids >= `storage_from`, the dataset's own order, as the daemon places it) are storage reads
without a window. With a window of depth N, a row that one of the N batches before it also
gathered is a window hit (graphtier.service.storage.window keeps it), so only the others are
read. The replay keeps, per storage row, the last batch that read it, so every depth asked
for is counted exactly in one pass. Device bytes are those of the `direct` reader's requests
(rows widened to 4 KiB blocks, adjacent rows coalesced: `plan_reads`), or the rows' own bytes
when the dataset has no feature file. The replay is one producer's stream of batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from pydantic import BaseModel, Field

from graphtier.service.storage import plan_reads
from graphtier.service.storage.read_plan import ALIGN


class WindowOutcome(BaseModel):
    """Storage reads with a look-ahead window of `depth` batches (0 = none)."""

    depth: int
    hit_ratio: float = Field(description="storage rows served by the window / all storage rows gathered")
    read_rows_per_batch: float
    read_bytes_per_batch: float = Field(description="device bytes of the direct reader's requests")
    read_bytes_per_epoch: float


class StorageOutlook(BaseModel):
    """The storage tier at a host budget: its size, the rows batches gather from it, and the window's effect."""

    host_budget: str
    storage_from: int = Field(description="first storage row: device-tier rows plus host-tier rows")
    storage_rows: int
    storage_bytes: int
    share_of_reads: float = Field(description="storage rows / all feature rows gathered")
    rows_per_batch: float
    row_bytes_per_batch: float
    rows_per_epoch: float
    row_bytes_per_epoch: float
    windows: list[WindowOutcome]


class WindowReplay:
    """Counts one replay's storage reads for several window depths; `observe` each batch's node ids."""

    def __init__(
        self,
        *,
        num_nodes: int,
        storage_from: int,
        depths: Sequence[int],
        row_bytes: int,
        request_bytes: Callable[[np.ndarray], int] | None = None,
    ) -> None:
        self.storage_from, self.row_bytes = storage_from, row_bytes
        self.depths = sorted(set(depths))
        self._last = np.full(max(num_nodes - storage_from, 0), -1, dtype=np.int64)
        self._request_bytes = request_bytes or (lambda rows: int(rows.size) * row_bytes)
        self.batches = self.gathered = self.rows = 0
        self.read_rows = dict.fromkeys(self.depths, 0)
        self.read_bytes = dict.fromkeys(self.depths, 0)

    def observe(self, node_ids: torch.Tensor) -> None:
        ids = node_ids.numpy()
        rows = np.unique(ids[ids >= self.storage_from] - self.storage_from)
        last = self._last[rows]
        distance = np.where(last >= 0, self.batches - last, np.iinfo(np.int64).max)
        for depth in self.depths:
            missed = rows[distance > depth]
            self.read_rows[depth] += missed.size
            self.read_bytes[depth] += self._request_bytes(missed)
        self._last[rows] = self.batches
        self.batches += 1
        self.gathered += ids.size
        self.rows += rows.size

    def outlook(self, *, host_budget: str, epochs: int, num_nodes: int) -> StorageOutlook:
        batches, epochs = max(self.batches, 1), max(epochs, 1)
        windows = [
            WindowOutcome(
                depth=d,
                hit_ratio=1 - self.read_rows[d] / self.rows if self.rows else 0.0,
                read_rows_per_batch=self.read_rows[d] / batches,
                read_bytes_per_batch=self.read_bytes[d] / batches,
                read_bytes_per_epoch=self.read_bytes[d] / epochs,
            )
            for d in self.depths
        ]
        storage_rows = max(num_nodes - self.storage_from, 0)
        return StorageOutlook(
            host_budget=host_budget,
            storage_from=self.storage_from,
            storage_rows=storage_rows,
            storage_bytes=storage_rows * self.row_bytes,
            share_of_reads=self.rows / max(self.gathered, 1),
            rows_per_batch=self.rows / batches,
            row_bytes_per_batch=self.rows * self.row_bytes / batches,
            rows_per_epoch=self.rows / epochs,
            row_bytes_per_epoch=self.rows * self.row_bytes / epochs,
            windows=windows,
        )


def direct_request_bytes(
    *, data_offset: int, row_bytes: int, storage_from: int, block: int = ALIGN
) -> Callable[[np.ndarray], int]:
    """Device bytes the direct reader asks for to read storage rows (storage-relative, sorted) in
    requests of whole `block`s (the file's O_DIRECT block: `StorageReader.block`)."""

    def request_bytes(rows: np.ndarray) -> int:
        return plan_reads(rows + storage_from, data_offset=data_offset, row_bytes=row_bytes, align=block).total

    return request_bytes


def window_depths(depth: int) -> list[int]:
    """The depths a report shows for a window of `depth`: 0, the powers of two below it, and it."""
    return sorted({0, depth, *(2**k for k in range(7) if 2**k < depth)})
