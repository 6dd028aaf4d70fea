"""A partitioned job's feature rows for one producer: this node's copy, and the other nodes' rows
fetched from their daemons per mini-batch (the `network` tier).

When a batch is sampled (look-ahead: `depth` batches before its gather) `admit` groups the rows
this node does not hold by owner (graphtier.contract.partition) and starts one FetchRows call per
owner at once (a call is split only when its reply would pass the daemon's message limit), over
TLS with the cluster's token, exactly as daemons call each other. When the batch is gathered,
`fill` copies the local rows from this node's copy (shared memory, read-only) and the fetched
rows from the replies into the slot, waiting only for replies that have not arrived yet. The
bytes are the owners' copies of the same prepared rows, so a batch is bit-identical to the
replicated run's. Counts: rows, bytes and calls per peer, the calls' latencies, and the time
gathers waited for them (near 0 when the look-ahead hides the network). A heterogeneous dataset's featured
node types are split each on its own (`node_type`, type-local row ids): one `PeerRows` per type.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.partition import MAX_FETCH_BYTES, MAX_FETCH_ROWS, FeaturePartition
from graphtier.contract.traffic import SOURCES, TrafficCounts
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.shm import SegmentRef, attach_tensor
from graphtier.v1 import features_pb2, features_pb2_grpc

_HOST, _NETWORK = SOURCES.index("host"), SOURCES.index("network")


class PartitionedFeatures(BaseModel):
    """What a producer of a partitioned job needs to find every row: its node's copy and the owners."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    partition: FeaturePartition
    local: SegmentRef = Field(description="This node's copy: replicated rows, then its own (read-only).")
    peers: list[str] = Field(min_length=2, description="Every node's daemon HOST:PORT, by node rank.")
    dataset: str
    version: str = Field(min_length=1, description="The dataset version (its content's hash) the job trains on.")
    token_file: Path = Field(description="The cluster's token, presented to the owners' daemons.")
    ca_file: Path | None = Field(
        description="The certificate trusted for the owners' TLS; None = plaintext (--insecure)."
    )
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Deadline of one FetchRows call.")
    node_type: str | None = Field(
        default=None,
        description="A heterogeneous dataset's node type these rows are of (type-local ids); None: homogeneous.",
    )


@dataclass
class RemoteTicket:
    """One admitted batch: where its remote rows go, and the calls fetching them."""

    positions: dict[int, np.ndarray]  # owner node rank -> positions in the batch
    calls: dict[int, list[grpc.Future]]  # owner node rank -> its calls, in row order


class PeerRows:
    """This producer's rows of a partitioned job; see the module docstring."""

    def __init__(self, config: PartitionedFeatures, *, row_shape: tuple[int, ...], dtype: torch.dtype) -> None:
        p = config.partition
        if len(config.peers) != p.nnodes:
            raise ChannelError(f"partitioned features: {len(config.peers)} node addresses for {p.nnodes} nodes")
        self.config, self.partition = config, p
        self.local = attach_tensor(config.local)
        if self.local.shape[0] != p.local_rows or tuple(self.local.shape[1:]) != row_shape or self.local.dtype != dtype:
            raise ChannelError(
                f"partitioned features: the node's copy is {self.local.dtype} {tuple(self.local.shape)}, "
                f"expected {dtype} ({p.local_rows}, {row_shape})"
            )
        self.row_shape, self.dtype = row_shape, dtype
        self.row_bytes = int(np.prod(row_shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
        self.max_rows = max(1, min(MAX_FETCH_ROWS, MAX_FETCH_BYTES // max(1, self.row_bytes)))
        try:
            token = config.token_file.read_text().strip()
            trusted = config.ca_file.read_bytes() if config.ca_file is not None else None
        except OSError as exc:
            raise ChannelError(f"partitioned features: cannot read {exc.filename} ({exc.strerror})") from None
        self._metadata = (("authorization", f"Bearer {token}"),)
        options = [("grpc.max_receive_message_length", MAX_FETCH_BYTES + (1 << 20))]
        self._channels: dict[int, grpc.Channel] = {}
        self._stubs: dict[int, features_pb2_grpc.FeatureServiceStub] = {}
        for k, address in enumerate(config.peers):
            if k == p.node_rank:
                continue
            if trusted is not None:
                channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=trusted), options)
            else:
                channel = grpc.insecure_channel(address, options)
            self._channels[k], self._stubs[k] = channel, features_pb2_grpc.FeatureServiceStub(channel)
        # cumulative, per owner node rank: rows, bytes, calls; and times in ns
        self.peer_rows = np.zeros(p.nnodes, np.int64)
        self.peer_bytes = np.zeros(p.nnodes, np.int64)
        self.peer_requests = np.zeros(p.nnodes, np.int64)
        self.fetch_ns = 0  # the calls' latencies, summed (written by gRPC's callback threads)
        self.wait_ns = 0
        self._lock = threading.Lock()

    def _done(self, issued_ns: int) -> None:
        with self._lock:
            self.fetch_ns += time.perf_counter_ns() - issued_ns

    def admit(self, ids: torch.Tensor) -> RemoteTicket:
        """Start fetching the batch's rows this node does not hold: one call per owner."""
        ids_np = ids.numpy()
        owner = self.partition.owner(ids_np)
        ticket = RemoteTicket(positions={}, calls={})
        for k, stub in self._stubs.items():
            pos = np.flatnonzero(owner == k)
            if not pos.size:
                continue
            ticket.positions[k] = pos
            rows = ids_np[pos]
            calls = []
            for start in range(0, rows.size, self.max_rows):
                request = features_pb2.FetchRowsRequest(
                    dataset=self.config.dataset,
                    version=self.config.version,
                    nnodes=self.partition.nnodes,
                    owner_rank=k,
                    replicated_rows=self.partition.replicated_rows,
                    rows=rows[start : start + self.max_rows].tolist(),
                    node_type=self.config.node_type or "",
                )
                issued = time.perf_counter_ns()
                call = stub.FetchRows.future(request, timeout=self.config.timeout_s, metadata=self._metadata)
                call.add_done_callback(lambda _, t=issued: self._done(t))
                calls.append(call)
            ticket.calls[k] = calls
        return ticket

    def _reply(self, k: int, call: grpc.Future) -> bytes:
        try:
            reply = call.result()
        except grpc.RpcError as error:
            raise ChannelError(
                f"partitioned features: node {k} ({self.config.peers[k]}) did not serve its rows: "
                f"{error.details()} [{error.code().name}]"
            ) from None
        if reply.row_bytes != self.row_bytes:
            raise ChannelError(
                f"partitioned features: node {k} ({self.config.peers[k]}) serves rows of "
                f"{reply.row_bytes} bytes, this node's are {self.row_bytes}"
            )
        return reply.data

    def fill(self, ticket: RemoteTicket, ids: torch.Tensor, out: torch.Tensor) -> TrafficCounts:
        """The batch's rows into out[:len(ids)]: local ones from this node's copy, the others from the replies."""
        ids_np = ids.numpy()
        local = np.flatnonzero(self.partition.is_local(ids_np))
        if local.size:
            index = torch.from_numpy(self.partition.local_index(ids_np[local]))
            out[torch.from_numpy(local)] = self.local.index_select(0, index)
        remote = 0
        for k, calls in ticket.calls.items():
            t0 = time.perf_counter_ns()
            data = b"".join(self._reply(k, call) for call in calls)
            self.wait_ns += time.perf_counter_ns() - t0
            pos = ticket.positions[k]
            if len(data) != pos.size * self.row_bytes:
                raise ChannelError(
                    f"partitioned features: node {k} ({self.config.peers[k]}) sent {len(data)} bytes "
                    f"for {pos.size} rows of {self.row_bytes}"
                )
            rows = torch.frombuffer(bytearray(data), dtype=self.dtype).reshape(pos.size, *self.row_shape)
            out[torch.from_numpy(pos)] = rows
            self.peer_rows[k] += pos.size
            self.peer_bytes[k] += len(data)
            self.peer_requests[k] += len(calls)
            remote += pos.size
        counts = [0] * len(SOURCES)
        counts[_HOST], counts[_NETWORK] = int(local.size), remote
        if local.size + remote != ids_np.size:
            raise ChannelError(
                f"partitioned features: {ids_np.size - local.size - remote} rows of the batch have "
                "no owner among the job's nodes"
            )
        return TrafficCounts.from_rows(counts, self.row_bytes, simulated=False)

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        self._stubs.clear()
