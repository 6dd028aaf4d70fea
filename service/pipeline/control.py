"""The control block of a producer channel: one int64 array in shared memory, plus error text.

Header (channel-wide): producer pid and start time, status, heartbeat, progress, end-of-epoch
and end-of-data markers, cumulative times, waits and per-tier traffic. One record per slot:
state (FREE / FILLING / READY / HELD), batch number, epoch, step, generation, sizes per hop,
sample and gather time and the batch's traffic. The header also holds the storage tier's
counters (`StorageCounters`: rows read or served by the look-ahead window, requests, times)
and a partitioned job's network tier (`NetworkCounters`: rows, bytes and calls per peer node
rank, fetch and wait times).
Times are `time.monotonic_ns()` (one clock for every process on a Linux host) or durations in ns.

Every field has one writer at a time: the producer writes everything except the fields
named `consumer_*` and a slot's READY -> HELD step; ordering between the two processes comes
from the socket messages (a system call is a full memory barrier), so no lock is needed.
The daemon attaches read-only and calls `stats()`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import torch

from graphtier.contract.fanouts import MAX_HOPS
from graphtier.contract.network import MAX_PEERS, NetworkCounters, PeerTraffic
from graphtier.contract.storage import STORAGE_READS, StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts

MAGIC = 0x4754504950454C31  # "GTPIPEL1"
HEADER_WORDS = 128
SLOT_WORDS = 64
ERROR_BYTES = 4096


class SlotState(IntEnum):
    FREE = 0
    FILLING = 1
    READY = 2
    HELD = 3


class ProducerStatus(IntEnum):
    STARTING = 0
    WAITING_FOR_CONSUMER = 1
    RUNNING = 2
    WAITING_FOR_SLOT = 3
    DRAINING = 4  # all batches published, waiting for the consumer to release them
    FINISHED = 5
    CONSUMER_GONE = 6
    FAILED = 7
    TERMINATED = 8


_TRAFFIC = tuple(f"{s}_{unit}" for s in SOURCES for unit in ("rows", "bytes"))
# StorageCounters fields (times in ns, the mode as its index in STORAGE_READS)
_STORAGE = (
    "storage_mode",
    "window_depth",
    "storage_read_rows",
    "storage_read_bytes",
    "storage_read_row_bytes",
    "storage_requests",
    "window_rows",
    "window_bytes",
    "storage_io_ns",
    "storage_request_ns",
    "storage_read_ns",
    "lookahead_batches",
    "window_cached_rows",
)


def _index(fields: tuple[tuple[str, int], ...], words: int) -> dict[str, slice]:
    out, at = {}, 0
    for name, width in fields:
        out[name] = slice(at, at + width)
        at += width
    if at > words:
        raise RuntimeError(f"control record needs {at} words, has {words}")  # a programming error
    return out


_HEADER = _index(
    (
        ("magic", 1),
        ("num_slots", 1),
        ("producer_pid", 1),
        ("producer_start_time", 1),
        ("status", 1),
        ("heartbeat_ns", 1),
        ("epoch", 1),
        ("batches_produced", 1),
        ("epochs_completed", 1),
        ("end_of_data", 1),
        ("producer_wait_ns", 1),
        ("sample_ns", 1),
        ("gather_ns", 1),
        ("slot_growths", 1),
        ("simulated", 1),
        ("error_len", 1),
        ("consumer_pid", 1),
        ("batches_consumed", 1),
        ("consumer_wait_ns", 1),
        ("consumer_last_wait_ns", 1),
        ("seeds_total", 1),
        ("sampled_nodes_total", 1),
        ("sampled_edges_total", 1),
    )
    + tuple((name, 1) for name in _TRAFFIC)
    + tuple((name, 1) for name in _STORAGE)
    + (
        ("network_fetch_ns", 1),
        ("network_wait_ns", 1),
        ("peer_rows", MAX_PEERS),
        ("peer_bytes", MAX_PEERS),
        ("peer_requests", MAX_PEERS),
    ),
    HEADER_WORDS,
)
_SLOT = _index(
    (
        ("state", 1),
        ("batch", 1),
        ("epoch", 1),
        ("step", 1),
        ("generation", 1),
        ("num_seeds", 1),
        ("num_nodes", 1),
        ("num_edges", 1),
        ("num_expanded", 1),
        ("cap_nodes", 1),
        ("cap_edges", 1),
        ("cap_expanded", 1),
        ("num_hops", 1),
        ("sample_seed", 1),
        ("sample_ns", 1),
        ("gather_ns", 1),
        ("ready_ns", 1),
    )
    + tuple((name, 1) for name in _TRAFFIC)
    + (("nodes_per_hop", MAX_HOPS + 1), ("edges_per_hop", MAX_HOPS)),
    SLOT_WORDS,
)


def control_words(num_slots: int) -> int:
    """int64 words of the control array for `num_slots` slots."""
    return HEADER_WORDS + SLOT_WORDS * num_slots


class _Record:
    """Named int64 fields over a numpy view of shared memory."""

    def __init__(self, words: np.ndarray, fields: dict[str, slice]) -> None:
        self._words = words
        self._fields = fields

    def __getitem__(self, name: str) -> int:
        return int(self._words[self._fields[name].start])

    def __setitem__(self, name: str, value: int) -> None:
        self._words[self._fields[name].start] = value

    def add(self, name: str, value: int) -> None:
        self._words[self._fields[name].start] += value

    def array(self, name: str) -> np.ndarray:
        return self._words[self._fields[name]]

    def traffic(self, simulated: bool) -> TrafficCounts:
        per = {s: SourceTraffic(self[f"{s}_rows"], self[f"{s}_bytes"]) for s in SOURCES}
        return TrafficCounts(**per, simulated=simulated)

    def storage(self) -> StorageCounters:
        return StorageCounters(
            mode=STORAGE_READS[self["storage_mode"]],
            window=self["window_depth"],
            read_rows=self["storage_read_rows"],
            read_bytes=self["storage_read_bytes"],
            read_row_bytes=self["storage_read_row_bytes"],
            requests=self["storage_requests"],
            window_rows=self["window_rows"],
            window_bytes=self["window_bytes"],
            io_seconds=self["storage_io_ns"] / 1e9,
            request_seconds=self["storage_request_ns"] / 1e9,
            read_seconds=self["storage_read_ns"] / 1e9,
            lookahead_batches=self["lookahead_batches"],
            window_cached_rows=self["window_cached_rows"],
        )

    def set_storage(self, counters: StorageCounters) -> None:
        self["storage_mode"], self["window_depth"] = STORAGE_READS.index(counters.mode), counters.window
        for name in ("read_rows", "read_bytes", "read_row_bytes", "requests"):
            self[f"storage_{name}"] = getattr(counters, name)
        self["window_rows"], self["window_bytes"] = counters.window_rows, counters.window_bytes
        for name in ("io", "request", "read"):
            self[f"storage_{name}_ns"] = round(getattr(counters, f"{name}_seconds") * 1e9)
        self["lookahead_batches"], self["window_cached_rows"] = counters.lookahead_batches, counters.window_cached_rows

    def network(self) -> NetworkCounters:
        """Per peer by node rank (the peer named by its rank; the daemon names it by address)."""
        rows, nbytes, calls = self.array("peer_rows"), self.array("peer_bytes"), self.array("peer_requests")
        peers = tuple(
            PeerTraffic(str(k), int(rows[k]), int(nbytes[k]), int(calls[k])) for k in range(MAX_PEERS) if calls[k]
        )
        return NetworkCounters(peers, self["network_fetch_ns"] / 1e9, self["network_wait_ns"] / 1e9)

    def add_network(self, node_rank: int, rows: int, nbytes: int, requests: int) -> None:
        self.array("peer_rows")[node_rank] += rows
        self.array("peer_bytes")[node_rank] += nbytes
        self.array("peer_requests")[node_rank] += requests

    def set_traffic(self, counts: TrafficCounts, *, add: bool = False) -> None:
        for source, traffic in counts.by_source().items():
            for unit, value in (("rows", traffic.rows), ("bytes", traffic.bytes)):
                if add:
                    self.add(f"{source}_{unit}", value)
                else:
                    self[f"{source}_{unit}"] = value


@dataclass(frozen=True)
class ChannelStats:
    """A snapshot of a channel's counters, for the daemon's status and metrics."""

    status: str
    producer_pid: int
    heartbeat_age_s: float
    epoch: int
    epochs_completed: int
    end_of_data: bool
    batches_produced: int
    batches_consumed: int
    ready_slots: int  # published, not yet taken: how far the producer is ahead
    held_slots: int
    slot_states: list[str]
    slot_growths: int
    sample_s: float
    gather_s: float
    producer_wait_s: float  # producer blocked on a full buffer (consumer is the bottleneck)
    consumer_wait_s: float  # consumer blocked on an empty buffer (producer is the bottleneck)
    consumer_last_wait_s: float
    seeds_total: int  # seeds, nodes and edges of every batch published so far
    sampled_nodes_total: int
    sampled_edges_total: int
    traffic: TrafficCounts
    storage: StorageCounters  # how the storage-tier rows were served (read or window hits), and at what cost
    error: str | None
    network: NetworkCounters = NetworkCounters()  # a partitioned job's rows fetched from each peer (by node rank)

    def to_dict(self) -> dict[str, object]:
        out = dict(self.__dict__)
        out["traffic"] = self.traffic.to_dict()
        out["storage"] = self.storage.to_dict()
        out["network"] = self.network.to_dict()
        return out


class ControlBlock:
    """Heterogeneous access to a channel's control array and error buffer (either side)."""

    def __init__(self, words: torch.Tensor, error: torch.Tensor) -> None:
        self._array = words.numpy()
        self._error = error.numpy()
        self.header = _Record(self._array[:HEADER_WORDS], _HEADER)
        count = (self._array.shape[0] - HEADER_WORDS) // SLOT_WORDS
        self.slots = [
            _Record(self._array[HEADER_WORDS + k * SLOT_WORDS : HEADER_WORDS + (k + 1) * SLOT_WORDS], _SLOT)
            for k in range(count)
        ]

    def initialise(self, *, num_slots: int, producer_pid: int, producer_start_time: int) -> None:
        self._array[:] = 0
        self.header["magic"] = MAGIC
        self.header["num_slots"] = num_slots
        self.header["producer_pid"] = producer_pid
        self.header["producer_start_time"] = producer_start_time
        self.header["status"] = ProducerStatus.STARTING
        self.beat()

    @property
    def valid(self) -> bool:
        return self.header["magic"] == MAGIC and self.header["num_slots"] == len(self.slots)

    def beat(self) -> None:
        self.header["heartbeat_ns"] = time.monotonic_ns()

    def heartbeat_age_s(self) -> float:
        return (time.monotonic_ns() - self.header["heartbeat_ns"]) / 1e9

    @property
    def status(self) -> ProducerStatus:
        return ProducerStatus(self.header["status"])

    @status.setter
    def status(self, value: ProducerStatus) -> None:
        self.header["status"] = value

    def set_error(self, message: str) -> None:
        data = message.encode("utf-8", "replace")[:ERROR_BYTES]
        self._error[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        self.header["error_len"] = len(data)

    def error(self) -> str | None:
        length = min(self.header["error_len"], ERROR_BYTES)
        return bytes(self._error[:length]).decode("utf-8", "replace") if length else None

    def stats(self) -> ChannelStats:
        h = self.header
        states = [SlotState(slot["state"]) for slot in self.slots]
        return ChannelStats(
            status=self.status.name.lower(),
            producer_pid=h["producer_pid"],
            heartbeat_age_s=self.heartbeat_age_s(),
            epoch=h["epoch"],
            epochs_completed=h["epochs_completed"],
            end_of_data=bool(h["end_of_data"]),
            batches_produced=h["batches_produced"],
            batches_consumed=h["batches_consumed"],
            ready_slots=states.count(SlotState.READY),
            held_slots=states.count(SlotState.HELD),
            slot_states=[s.name.lower() for s in states],
            slot_growths=h["slot_growths"],
            sample_s=h["sample_ns"] / 1e9,
            gather_s=h["gather_ns"] / 1e9,
            producer_wait_s=h["producer_wait_ns"] / 1e9,
            consumer_wait_s=h["consumer_wait_ns"] / 1e9,
            consumer_last_wait_s=h["consumer_last_wait_ns"] / 1e9,
            seeds_total=h["seeds_total"],
            sampled_nodes_total=h["sampled_nodes_total"],
            sampled_edges_total=h["sampled_edges_total"],
            traffic=h.traffic(bool(h["simulated"])),
            storage=h.storage(),
            error=self.error(),
            network=h.network(),
        )
