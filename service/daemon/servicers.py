"""The daemon's gRPC servicers: proto in, domain call, proto out; nothing else.

`DatasetServicer` fronts the `DatasetRegistry`, `ProgressServicer` the `ProgressTracker`;
the job and channel servicers (`jobs/servicer.py`) front the `JobManager`.
Conversions live in `conversions.py`; errors become status codes in `rpc/grpc_status.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from graphtier.contract import conversions
from graphtier.contract.jobs import conversions as job_conversions
from graphtier.contract.jobs.state import JOB_TOKEN_HEADER
from graphtier.service.daemon.datasets.registry import DatasetRegistry
from graphtier.service.daemon.jobs.progress import ProgressTracker
from graphtier.service.daemon.rpc.access import Access
from graphtier.service.daemon.rpc.grpc_status import grpc_method
from graphtier.service.store.wire import layout_to_proto
from graphtier.v1 import (
    channels_pb2,
    channels_pb2_grpc,
    cluster_pb2,
    cluster_pb2_grpc,
    datasets_pb2,
    datasets_pb2_grpc,
    features_pb2,
    features_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    progress_pb2,
    progress_pb2_grpc,
)

if TYPE_CHECKING:
    from graphtier.service.daemon.cluster.node import ClusterNode
    from graphtier.service.daemon.jobs.manager import JobManager


class DatasetServicer(datasets_pb2_grpc.DatasetServiceServicer):
    """LoadDataset, UnloadDataset, ListDatasets, GetDatasetLayout."""

    def __init__(self, registry: DatasetRegistry, access: Access, jobs: JobManager | None = None) -> None:
        self.registry, self.access, self.jobs = registry, access, jobs

    @grpc_method
    def LoadDataset(
        self, request: datasets_pb2.LoadDatasetRequest, context: grpc.ServicerContext
    ) -> datasets_pb2.LoadDatasetResponse:
        self.access.user(context, f"loading dataset {request.name[:100]!r}")
        budgets = conversions.budgets_from_proto(request.budgets) if request.HasField("budgets") else None
        result = self.registry.load(request.name, budgets)
        return datasets_pb2.LoadDatasetResponse(
            layout=layout_to_proto(result.layout), already_loaded=result.already_loaded
        )

    @grpc_method
    def UnloadDataset(
        self, request: datasets_pb2.UnloadDatasetRequest, context: grpc.ServicerContext
    ) -> datasets_pb2.UnloadDatasetResponse:
        caller = self.access.user(context, f"unloading dataset {request.name[:100]!r}")
        if request.force:  # it cancels the jobs that use the dataset: they must all be the caller's
            for job_id in self.jobs.table.jobs_using(request.name) if self.jobs is not None else []:
                owner = self.access.owner_of(job_id)
                self.access.check_owner(caller, job_id, owner, f"unloading {request.name!r} with force cancels")
        result = self.registry.unload(request.name, force=request.force)
        return datasets_pb2.UnloadDatasetResponse(
            released_bytes=result.released_bytes, cancelled_job_ids=result.cancelled_job_ids
        )

    @grpc_method
    def ListDatasets(
        self, request: datasets_pb2.ListDatasetsRequest, context: grpc.ServicerContext
    ) -> datasets_pb2.ListDatasetsResponse:
        summaries = self.registry.summaries(include_prepared=request.include_prepared)
        return datasets_pb2.ListDatasetsResponse(datasets=[conversions.summary_to_proto(s) for s in summaries])

    @grpc_method
    def GetDatasetLayout(
        self, request: datasets_pb2.GetDatasetLayoutRequest, context: grpc.ServicerContext
    ) -> datasets_pb2.DatasetLayout:
        if request.job_id and self.jobs is not None:
            self.access.job(context, request.job_id, "reading the dataset copy of")
            return layout_to_proto(self.jobs.job_layout(request.job_id, request.name))
        return layout_to_proto(self.registry.layout(request.name))


class ProgressServicer(progress_pb2_grpc.ProgressServiceServicer):
    """ReportProgress."""

    def __init__(self, tracker: ProgressTracker, access: Access) -> None:
        self.tracker, self.access = tracker, access

    @grpc_method
    def ReportProgress(
        self, request: progress_pb2.ProgressReport, context: grpc.ServicerContext
    ) -> progress_pb2.ProgressAck:
        report = job_conversions.report_from_proto(request)
        self.access.job(context, report.job_id, "reporting progress of")
        token = dict(context.invocation_metadata() or ()).get(JOB_TOKEN_HEADER, "")
        self.tracker.jobs.check_reporter(report.job_id, str(token))
        cancel = self.tracker.record(report)
        return progress_pb2.ProgressAck(cancel_requested=cancel)


SERVICE_NAMES: tuple[str, ...] = (
    datasets_pb2.DESCRIPTOR.services_by_name["DatasetService"].full_name,
    progress_pb2.DESCRIPTOR.services_by_name["ProgressService"].full_name,
    jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    channels_pb2.DESCRIPTOR.services_by_name["ChannelService"].full_name,
    cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
    features_pb2.DESCRIPTOR.services_by_name["FeatureService"].full_name,
)


def add_servicers(
    server: grpc.Server,
    registry: DatasetRegistry,
    tracker: ProgressTracker,
    access: Access,
    jobs: JobManager | None = None,
    cluster: ClusterNode | None = None,
    *,
    max_event_streams: int,
) -> None:
    """Register every graphtier.v1 service this daemon implements (the names are SERVICE_NAMES;
    JobService, ChannelService and FeatureService only with a job manager, ClusterService only with a
    cluster node); each asks `access` who may call it."""
    datasets_pb2_grpc.add_DatasetServiceServicer_to_server(DatasetServicer(registry, access, jobs), server)
    progress_pb2_grpc.add_ProgressServiceServicer_to_server(ProgressServicer(tracker, access), server)
    if jobs is not None:
        from graphtier.service.daemon.jobs.servicer import ChannelServicer, EventStreamSlots, JobServicer

        jobs_pb2_grpc.add_JobServiceServicer_to_server(
            JobServicer(jobs, EventStreamSlots(max_event_streams), access, cluster), server
        )
        channels_pb2_grpc.add_ChannelServiceServicer_to_server(ChannelServicer(jobs, access), server)
        from graphtier.service.daemon.cluster.features_servicer import FeatureServicer

        features_pb2_grpc.add_FeatureServiceServicer_to_server(FeatureServicer(jobs.partitions, access), server)
    if cluster is not None:
        from graphtier.service.daemon.cluster.servicer import ClusterServicer

        cluster_pb2_grpc.add_ClusterServiceServicer_to_server(ClusterServicer(cluster, access), server)
