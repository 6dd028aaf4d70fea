"""`MappedReader`: storage rows copied out of the file's memory mapping (the `mmap` mode).

The same `read(rows, out)` as `StorageReader`, for the look-ahead window in `mmap` mode:
the rows are copied from the mapping (faulting their pages in through the page cache), so
it issues no requests of its own and counts each row's bytes as read. Every row copied out
is checked against its recorded checksum (`row_checksums`), when the dataset has them.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.storage.direct_reader import ReaderStats, output_rows
from graphtier.service.storage.row_checksums import RowChecksums


class MappedReader:
    """Reads rows of the storage tier's mapping (`storage`: rows [host_end, num_rows))."""

    mode = "mmap"

    def __init__(self, storage: torch.Tensor, checksums: RowChecksums | None = None) -> None:
        self.storage = storage
        self.checksums = checksums  # each row copied out is checked against them
        self.row_bytes = storage[0].numel() * storage.element_size() if storage.shape[0] else 0
        self.stats = ReaderStats()

    def empty_rows(self, count: int) -> torch.Tensor:
        """`count` uninitialised rows of bytes (a mapping has no alignment to meet)."""
        return torch.empty((count, self.row_bytes), dtype=torch.uint8)

    def read(self, rows: np.ndarray, out: np.ndarray) -> None:
        """Rows `rows` (storage-relative) into out[i], `out` with the storage rows' layout or as bytes."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return
        if int(rows.min()) < 0 or int(rows.max()) >= self.storage.shape[0]:
            raise GraphtierError(f"storage rows must lie in [0, {self.storage.shape[0]})")
        started = time.perf_counter()
        target = torch.from_numpy(output_rows(out, rows.size, self.row_bytes))
        source = self.storage.view(self.storage.shape[0], -1).view(torch.uint8)
        torch.index_select(source, 0, torch.from_numpy(rows), out=target)
        if self.checksums is not None:
            self.checksums.verify(rows, target.numpy())
        s = self.stats
        s.batches, s.rows = s.batches + 1, s.rows + rows.size
        s.bytes_read = s.row_bytes = s.row_bytes + rows.size * self.row_bytes
        s.seconds += time.perf_counter() - started

    def close(self) -> None:
        """Nothing to release: the mapping belongs to the attached dataset."""
