"""`NetworkCounters`: the `network` tier of a partitioned job, per peer, and what fetching cost.

A producer of a partitioned job (graphtier.contract.partition) fetches the rows its batch needs
but its node does not hold from their owners' daemons, one FetchRows call per owner per batch,
issued when the batch is sampled (ahead of its gather). Rows and bytes per peer sum to the
`network` source of the tiered traffic (`TrafficCounts.network`). `fetch_seconds` sums every
call's latency; `wait_seconds` is the time gathers waited for replies that had not arrived yet:
near 0 when the look-ahead hides the fetches.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_PEERS = 16  # peers a producer's control block has counters for (a partitioned job's nodes - 1)


@dataclass(frozen=True)
class PeerTraffic:
    """Rows, bytes and calls fetched from one peer (by its daemon's address)."""

    peer: str
    rows: int = 0
    bytes: int = 0
    requests: int = 0

    def __add__(self, other: PeerTraffic) -> PeerTraffic:
        return PeerTraffic(self.peer, self.rows + other.rows, self.bytes + other.bytes, self.requests + other.requests)

    def minus(self, other: PeerTraffic | None) -> PeerTraffic:
        if other is None:
            return self
        return PeerTraffic(self.peer, self.rows - other.rows, self.bytes - other.bytes, self.requests - other.requests)


@dataclass(frozen=True)
class NetworkCounters:
    """Cumulative network-tier counters of one producer (or a sum of several)."""

    peers: tuple[PeerTraffic, ...] = field(default_factory=tuple)
    fetch_seconds: float = 0.0
    wait_seconds: float = 0.0

    def __add__(self, other: NetworkCounters) -> NetworkCounters:
        if not isinstance(other, NetworkCounters):
            return NotImplemented
        merged: dict[str, PeerTraffic] = {p.peer: p for p in self.peers}
        for p in other.peers:
            merged[p.peer] = merged[p.peer] + p if p.peer in merged else p
        return NetworkCounters(
            tuple(merged[k] for k in sorted(merged)),
            self.fetch_seconds + other.fetch_seconds,
            self.wait_seconds + other.wait_seconds,
        )

    def minus(self, other: NetworkCounters | None) -> NetworkCounters:
        """The increments since `other` (an earlier report of the same producer)."""
        if other is None:
            return self
        before = {p.peer: p for p in other.peers}
        return NetworkCounters(
            tuple(p.minus(before.get(p.peer)) for p in self.peers),
            self.fetch_seconds - other.fetch_seconds,
            self.wait_seconds - other.wait_seconds,
        )

    def by_address(self, addresses: list[str]) -> NetworkCounters:
        """Peers named by their daemon's address (a producer's control block names them by node rank)."""

        def name(rank: str) -> str:
            return addresses[int(rank)] if rank.isdigit() and int(rank) < len(addresses) else f"node rank {rank}"

        return NetworkCounters(
            tuple(PeerTraffic(name(p.peer), p.rows, p.bytes, p.requests) for p in self.peers),
            self.fetch_seconds,
            self.wait_seconds,
        )

    def went_back(self, other: NetworkCounters) -> bool:
        before = {p.peer: p for p in other.peers}
        return any(p.rows < before[p.peer].rows for p in self.peers if p.peer in before)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.peers)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.peers)

    @property
    def requests(self) -> int:
        return sum(p.requests for p in self.peers)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: totals, times and one entry per peer."""
        return {
            "rows": self.rows,
            "bytes": self.bytes,
            "requests": self.requests,
            "fetch_seconds": self.fetch_seconds,
            "wait_seconds": self.wait_seconds,
            "peers": [{"peer": p.peer, "rows": p.rows, "bytes": p.bytes, "requests": p.requests} for p in self.peers],
        }
