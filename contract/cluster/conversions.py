"""Conversions between `graphtier/v1/cluster.proto` (and jobs.proto's JobPlacement/JobNode) and
the contract's cluster types (`cluster/models.py`, `jobs/view.py`)."""

from __future__ import annotations

from graphtier.contract.cluster.models import ClusterView, NodeDataset, NodeInfo, NodeLoad, PushResult
from graphtier.contract.jobs.conversions import placement_from_proto  # noqa: F401  (re-exported)
from graphtier.contract.jobs.view import JobPlacementInfo
from graphtier.v1 import cluster_pb2, jobs_pb2


def node_to_proto(node: NodeInfo) -> cluster_pb2.NodeInfo:
    return cluster_pb2.NodeInfo(
        name=node.name,
        address=node.address,
        health=node.health,
        message=node.message,
        pid=node.pid,
        gpus=node.gpus,
        datasets=[cluster_pb2.NodeDataset(**d.model_dump()) for d in node.datasets],
        load=cluster_pb2.NodeLoad(**node.load.model_dump()),
        uptime_seconds=node.uptime_seconds,
        **{"self": node.is_self},
    )


def node_from_proto(m: cluster_pb2.NodeInfo) -> NodeInfo:
    load = m.load
    return NodeInfo(
        name=m.name,
        address=m.address,
        health=m.health or "NOT_SERVING",
        message=m.message,
        pid=m.pid,
        gpus=m.gpus,
        datasets=[
            NodeDataset(name=d.name, version=d.version, loaded=d.loaded, num_nodes=d.num_nodes, size_bytes=d.size_bytes)
            for d in m.datasets
        ],
        load=NodeLoad(
            load1=load.load1,
            load5=load.load5,
            load15=load.load15,
            cpus=load.cpus,
            memory_total_bytes=load.memory_total_bytes,
            memory_available_bytes=load.memory_available_bytes,
            active_jobs=load.active_jobs,
        ),
        is_self=m.self,
        uptime_seconds=m.uptime_seconds,
    )


def view_to_proto(view: ClusterView) -> cluster_pb2.ClusterView:
    return cluster_pb2.ClusterView(nodes=[node_to_proto(n) for n in view.nodes])


def view_from_proto(m: cluster_pb2.ClusterView) -> ClusterView:
    return ClusterView(nodes=[node_from_proto(n) for n in m.nodes])


def push_to_proto(result: PushResult) -> cluster_pb2.PushDatasetResponse:
    return cluster_pb2.PushDatasetResponse(**result.model_dump())


def push_from_proto(m: cluster_pb2.PushDatasetResponse) -> PushResult:
    return PushResult(
        node=m.node, name=m.name, version=m.version, bytes=m.bytes, seconds=m.seconds, unchanged=m.unchanged
    )


def placement_to_proto(p: JobPlacementInfo) -> jobs_pb2.JobPlacement:
    return jobs_pb2.JobPlacement(**p.model_dump())
