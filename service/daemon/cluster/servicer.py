"""The ClusterService servicer: proto in, cluster call, proto out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import grpc

from graphtier.contract.cluster import conversions as cconv
from graphtier.contract.errors import DatasetTransferError, InvalidRequestError
from graphtier.contract.jobs import conversions as jconv
from graphtier.service.daemon.rpc.grpc_status import grpc_method
from graphtier.v1 import cluster_pb2, cluster_pb2_grpc, jobs_pb2

if TYPE_CHECKING:
    from graphtier.service.daemon.cluster.node import ClusterNode
    from graphtier.service.daemon.rpc.access import Access


def _unbroken(
    chunks: Iterator[cluster_pb2.DatasetChunk], context: grpc.ServicerContext
) -> Iterator[cluster_pb2.DatasetChunk]:
    """The stream's messages; a sender that went away becomes a DatasetTransferError, not a bug."""
    try:
        yield from chunks
    except Exception as exc:  # grpc raises its own kinds when the call is cancelled
        raise DatasetTransferError(f"the dataset stream from {context.peer()} broke off: {exc!r}") from None


class ClusterServicer(cluster_pb2_grpc.ClusterServiceServicer):
    """GetNode, GetCluster, StartJobPart, ReceiveDataset, PushDataset, JoinCluster, AdmitPeer."""

    def __init__(self, node: ClusterNode, access: Access) -> None:
        self.node, self.access = node, access

    @grpc_method
    def GetNode(self, request: cluster_pb2.GetNodeRequest, context: grpc.ServicerContext) -> cluster_pb2.NodeInfo:
        return cconv.node_to_proto(self.node.describe_self())

    @grpc_method
    def GetCluster(
        self, request: cluster_pb2.GetClusterRequest, context: grpc.ServicerContext
    ) -> cluster_pb2.ClusterView:
        return cconv.view_to_proto(self.node.view())

    @grpc_method
    def StartJobPart(self, request: cluster_pb2.StartJobPartRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        caller = self.access.admin(context, "StartJobPart (a coordinating peer's call)")
        if not request.HasField("placement"):
            raise InvalidRequestError("StartJobPart needs the part's placement")
        spec = jconv.spec_from_proto(request.spec)
        placement = cconv.placement_from_proto(request.placement)
        owner = jconv.owner_from_proto(request.owner) if request.HasField("owner") else None
        assert caller.user is not None
        return jconv.job_to_proto(self.node.start_part(spec, placement, owner or caller.user))

    @grpc_method
    def ReceiveDataset(
        self, request_iterator: Iterator[cluster_pb2.DatasetChunk], context: grpc.ServicerContext
    ) -> cluster_pb2.ReceiveDatasetResponse:
        self.access.admin(context, "ReceiveDataset (a peer's dataset stream)")
        return self.node.receiver.receive(_unbroken(request_iterator, context))

    @grpc_method
    def PushDataset(
        self, request: cluster_pb2.PushDatasetRequest, context: grpc.ServicerContext
    ) -> cluster_pb2.PushDatasetResponse:
        self.access.admin(context, f"pushing dataset {request.name[:100]!r} to a peer")
        return cconv.push_to_proto(self.node.push(request.name, request.node, replace=request.replace))

    @grpc_method
    def JoinCluster(
        self, request: cluster_pb2.JoinClusterRequest, context: grpc.ServicerContext
    ) -> cluster_pb2.ClusterView:
        self.access.admin(context, "joining a cluster")
        return cconv.view_to_proto(self.node.join(request.address))

    @grpc_method
    def AdmitPeer(
        self, request: cluster_pb2.AdmitPeerRequest, context: grpc.ServicerContext
    ) -> cluster_pb2.ClusterView:
        self.access.admin(context, "admitting a peer")
        return cconv.view_to_proto(self.node.admit(request.address))
