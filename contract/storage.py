"""`StorageCounters`: how a producer's storage-tier rows were served, and what reading them cost.

Every storage-tier row a batch gathers is counted once, either as *read* (fetched from the
file for this batch) or as a *window hit* (already fetched for another batch inside the
look-ahead window, graphtier.service.storage.window), so `read_rows + window_rows` equals the `storage` rows
of the tiered traffic. `read_bytes` is what the device was asked for: whole aligned
requests in the `direct` and `page-cache` modes, the rows' own bytes through the `mmap`
mapping (whose page faults are not seen); `read_row_bytes` the bytes of the rows those reads
were for, so `read_amplification` (their ratio) is what a row needed cost in device bytes.
Times: `io_seconds` while requests were in flight, `request_seconds` the sum of every
request's latency (their ratio is the mean queue depth), `read_seconds` all of it (planning, waiting, copying rows out).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

StorageReads = Literal["mmap", "direct", "page-cache"]
STORAGE_READS: tuple[str, ...] = ("mmap", "direct", "page-cache")
MAX_WINDOW = 64  # the deepest look-ahead a job may ask for, in batches


@dataclass(frozen=True)
class StorageCounters:
    """Cumulative storage-tier counters of one producer (or a sum of several), plus two gauges."""

    mode: str = "mmap"
    window: int = 0  # look-ahead depth in batches; 0 = off
    read_rows: int = 0
    read_bytes: int = 0
    read_row_bytes: int = 0  # bytes of the rows read: read_rows x the row's bytes
    requests: int = 0
    window_rows: int = 0
    window_bytes: int = 0
    io_seconds: float = 0.0
    request_seconds: float = 0.0
    read_seconds: float = 0.0
    lookahead_batches: int = 0  # gauge: batches sampled ahead of the one being gathered
    window_cached_rows: int = 0  # gauge: storage rows held for the batches in the window

    def __add__(self, other: StorageCounters) -> StorageCounters:
        if not isinstance(other, StorageCounters):
            return NotImplemented
        summed = {name: getattr(self, name) + getattr(other, name) for name in _SUMMED}
        mode = self.mode if self.mode == other.mode else "mixed"
        return StorageCounters(mode=mode, window=max(self.window, other.window), **summed)

    @property
    def rows(self) -> int:
        """Storage-tier rows served: read plus window hits."""
        return self.read_rows + self.window_rows

    @property
    def window_hit_ratio(self) -> float:
        """Share of storage-tier rows served by the window; 0.0 before any."""
        return self.window_rows / self.rows if self.rows else 0.0

    @property
    def queue_depth(self) -> float:
        """Mean requests in flight while any was (Little's law); 0.0 without requests."""
        return self.request_seconds / self.io_seconds if self.io_seconds > 0 else 0.0

    @property
    def read_amplification(self) -> float:
        """Device bytes read per byte of the rows needed (1.0: nothing read beside them); 0.0 before any read."""
        return self.read_bytes / self.read_row_bytes if self.read_row_bytes else 0.0

    @property
    def bandwidth(self) -> float:
        """Device bytes per second while requests were in flight; 0.0 when not measured."""
        return self.read_bytes / self.io_seconds if self.io_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: every counter, the gauges and the derived figures."""
        out: dict[str, object] = asdict(self)
        out.update(
            window_hit_ratio=self.window_hit_ratio,
            read_amplification=self.read_amplification,
            queue_depth=self.queue_depth,
            bandwidth=self.bandwidth,
        )
        return out


_SUMMED = tuple(name for name in StorageCounters.__dataclass_fields__ if name not in ("mode", "window"))
