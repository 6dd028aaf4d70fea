"""Exact traffic accounting of a tiered gather: rows and bytes served by each source.

Sources: `replicated` (the GPU's own replica), `interleaved_local` (this GPU's share of the
interleaved tier), `interleaved_peer` (another GPU's share: would cross NVLink), `host`
(pinned host memory: would cross PCIe), `storage` (memory-mapped file), `network` (another
node's daemon: a partitioned job's rows this node does not hold, fetched per batch over gRPC;
see graphtier.contract.partition). On a CPU-only machine the device tiers are accounted, not
real; `simulated` carries that through every sum so reports can say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

GATHER_SOURCES: tuple[str, ...] = ("replicated", "interleaved_local", "interleaved_peer", "host", "storage")
SOURCES: tuple[str, ...] = (*GATHER_SOURCES, "network")  # the gather's own sources, then the other nodes
DEVICE_SOURCES: tuple[str, ...] = ("replicated", "interleaved_local", "interleaved_peer")


@dataclass(frozen=True)
class SourceTraffic:
    """Rows and bytes served by one source."""

    rows: int = 0
    bytes: int = 0

    def __add__(self, other: SourceTraffic) -> SourceTraffic:
        return SourceTraffic(self.rows + other.rows, self.bytes + other.bytes)


@dataclass(frozen=True)
class TrafficCounts:
    """Per-source rows and bytes of one or more gathers; immutable, summed with `+`/`+=`/sum()."""

    replicated: SourceTraffic = field(default_factory=SourceTraffic)
    interleaved_local: SourceTraffic = field(default_factory=SourceTraffic)
    interleaved_peer: SourceTraffic = field(default_factory=SourceTraffic)
    host: SourceTraffic = field(default_factory=SourceTraffic)
    storage: SourceTraffic = field(default_factory=SourceTraffic)
    network: SourceTraffic = field(default_factory=SourceTraffic)
    simulated: bool = False

    @classmethod
    def from_rows(cls, rows: Sequence[int], row_bytes: int, *, simulated: bool) -> TrafficCounts:
        """Counts from rows per source in GATHER_SOURCES order (a local gather: no network rows), or in
        SOURCES order, each row `row_bytes` long."""
        if len(rows) not in (len(GATHER_SOURCES), len(SOURCES)):
            raise ValueError(
                f"expected {len(GATHER_SOURCES)} row counts ({', '.join(GATHER_SOURCES)}), or "
                f"{len(SOURCES)} with network, got {len(rows)}"
            )
        per = {name: SourceTraffic(int(r), int(r) * row_bytes) for name, r in zip(SOURCES, rows, strict=False)}
        return cls(**per, simulated=simulated)

    def __add__(self, other: TrafficCounts) -> TrafficCounts:
        if not isinstance(other, TrafficCounts):
            return NotImplemented
        per = {name: getattr(self, name) + getattr(other, name) for name in SOURCES}
        return TrafficCounts(**per, simulated=self.simulated or other.simulated)

    def __radd__(self, other: object) -> TrafficCounts:
        if other == 0:  # lets sum() start from its default 0
            return self
        return NotImplemented

    def by_source(self) -> dict[str, SourceTraffic]:
        return {name: getattr(self, name) for name in SOURCES}

    @property
    def total_rows(self) -> int:
        return sum(getattr(self, name).rows for name in SOURCES)

    @property
    def total_bytes(self) -> int:
        return sum(getattr(self, name).bytes for name in SOURCES)

    @property
    def device_bytes(self) -> int:
        """Bytes served from GPU memory: replicated + interleaved (local and peer)."""
        return sum(getattr(self, name).bytes for name in DEVICE_SOURCES)

    @property
    def hit_ratio(self) -> float:
        """Share of bytes served by the device tiers; 0.0 when nothing was gathered."""
        total = self.total_bytes
        return self.device_bytes / total if total else 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready view: per-source rows/bytes, totals, hit ratio and the simulated flag."""
        out: dict[str, object] = {name: {"rows": t.rows, "bytes": t.bytes} for name, t in self.by_source().items()}
        out.update(
            total_rows=self.total_rows,
            total_bytes=self.total_bytes,
            device_bytes=self.device_bytes,
            hit_ratio=self.hit_ratio,
            simulated=self.simulated,
        )
        return out
