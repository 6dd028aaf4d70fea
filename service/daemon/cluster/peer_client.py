"""`PeerClient`: this daemon's calls to another daemon of the cluster, over its TCP listener.

Every call carries the cluster's token (`authorization: Bearer`) over TLS trusting the peer CA
(plaintext only when this daemon itself runs `--insecure`). Failures become a `PeerError` that
names the node and says which of the usual causes it is: the peer refused the token, the TLS
handshake failed (a plaintext listener, an untrusted certificate), nothing listens there, or
it did not answer in time. Methods take and return contract types, never `_pb2` messages
(except `job_events`, which relays a part's event stream as it came).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from graphtier.contract.cluster import conversions as cconv
from graphtier.contract.cluster.models import ClusterView, NodeInfo
from graphtier.contract.errors import DaemonError
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs import conversions as jconv
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.view import JobInfo, JobPlacementInfo
from graphtier.service.daemon.cluster.settings import parse_peer
from graphtier.v1 import cluster_pb2, cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc

Reply = TypeVar("Reply")
MAX_MESSAGE_BYTES = 8 << 20  # dataset chunks are 4 MiB


class PeerError(DaemonError):
    """A peer daemon was unreachable or refused this one; `health` is UNREACHABLE or REFUSED, or
    the peer answered with an error (`code` its status code name)."""

    def __init__(self, message: str, *, health: str = "UNREACHABLE", code: str = "") -> None:
        super().__init__(message)
        self.health, self.code = health, code


def _tcp_answers(address: str, timeout_s: float = 2.0) -> bool:
    host, port = parse_peer(address)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


class PeerClient:
    """A channel to the daemon at `address`; `name` is how errors call it."""

    def __init__(
        self, address: str, *, token: str, trusted_pem: bytes | None, timeout_s: float, name: str | None = None
    ) -> None:
        self.address, self.name, self.timeout_s = address, name or address, timeout_s
        self.tls = trusted_pem is not None
        self._metadata = (("authorization", f"Bearer {token}"),)
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ]
        if trusted_pem is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates=trusted_pem)
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._cluster = cluster_pb2_grpc.ClusterServiceStub(self._channel)
        self._jobs = jobs_pb2_grpc.JobServiceStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    @property
    def where(self) -> str:
        return self.address if self.name == self.address else f"{self.name} ({self.address})"

    def explain(self, error: grpc.RpcError) -> PeerError:
        """The PeerError for a failed call: which node, and what most likely went wrong."""
        code, details = error.code(), error.details() or ""
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return PeerError(
                f"node {self.where} refused this daemon: {details}. Every node of a cluster must hold the "
                "same token (token_file)",
                health="REFUSED",
                code=code.name,
            )
        if code == grpc.StatusCode.UNAVAILABLE:
            lowered = details.lower()
            if "handshake" in lowered or "ssl" in lowered or "certificate" in lowered or "tsi_" in lowered:
                return PeerError(
                    f"TLS with node {self.where} failed ({details}): it must serve TLS (not --insecure) "
                    "with a certificate this daemon's peer_ca trusts",
                    health="REFUSED",
                    code=code.name,
                )
            if _tcp_answers(self.address):
                how = "TLS" if self.tls else "plaintext (this daemon runs --insecure)"
                return PeerError(
                    f"node {self.where} accepts TCP but not gRPC over {how} ({details}): a TLS listener "
                    "refuses plaintext, and every node of a cluster must use the same",
                    health="REFUSED",
                    code=code.name,
                )
            return PeerError(f"node {self.where} is unreachable ({details})", code=code.name)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return PeerError(f"node {self.where} did not answer within {self.timeout_s:g} s", code=code.name)
        return PeerError(f"node {self.where}: {details} [{code.name}]", health="SERVING", code=code.name)

    def _call(self, method: Callable[..., Reply], request: Any, timeout_s: float | None = None) -> Reply:
        try:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as error:
            raise self.explain(error) from None

    # Cluster

    def get_node(self) -> NodeInfo:
        return cconv.node_from_proto(self._call(self._cluster.GetNode, cluster_pb2.GetNodeRequest()))

    def admit_peer(self, address: str) -> ClusterView:
        """Asks the peer to admit the daemon at `address` (this one) as its peer; its view of the cluster."""
        request = cluster_pb2.AdmitPeerRequest(address=address)
        return cconv.view_from_proto(self._call(self._cluster.AdmitPeer, request, 2 * self.timeout_s))

    def start_job_part(
        self, spec: JobSpec, placement: JobPlacementInfo, owner: JobOwner, *, timeout_s: float = 600.0
    ) -> JobInfo:
        request = cluster_pb2.StartJobPartRequest(
            spec=jconv.spec_to_proto(spec),
            placement=cconv.placement_to_proto(placement),
            owner=jconv.owner_to_proto(owner),
        )
        return jconv.job_from_proto(self._call(self._cluster.StartJobPart, request, timeout_s))

    def receive_dataset(
        self, chunks: Iterator[cluster_pb2.DatasetChunk], *, timeout_s: float = 3600.0
    ) -> cluster_pb2.ReceiveDatasetResponse:
        return self._call(self._cluster.ReceiveDataset, chunks, timeout_s)

    # Jobs

    def get_job(self, job_id: str) -> JobInfo:
        return jconv.job_from_proto(self._call(self._jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id)))

    def cancel_job(self, job_id: str, reason: str, *, timeout_s: float = 120.0) -> JobInfo:
        request = jobs_pb2.CancelJobRequest(job_id=job_id, reason=reason)
        return jconv.job_from_proto(self._call(self._jobs.CancelJob, request, timeout_s))

    def job_events(self, request: jobs_pb2.StreamJobEventsRequest) -> Iterator[jobs_pb2.JobEvent]:
        """The part's events as the peer sends them (relayed unchanged)."""
        stream = self._jobs.StreamJobEvents(
            request, timeout=None if request.follow else self.timeout_s, metadata=self._metadata
        )
        try:
            yield from stream
        except grpc.RpcError as error:
            raise self.explain(error) from None
        finally:
            stream.cancel()
