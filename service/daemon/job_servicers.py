"""The JobService and ChannelService servicers: proto in, `JobManager` call, proto out.

Conversions live in `job_conversions.py`; errors become status codes in `grpc_status.py`.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from graphtier.contract import job_conversions as convert
from graphtier.contract.layouts import grant_to_proto
from graphtier.service.daemon.grpc_status import grpc_method
from graphtier.service.daemon.job_events import JobEventLog
from graphtier.service.daemon.job_manager import JobManager
from graphtier.contract.job_state import JOB_TOKEN_HEADER
from graphtier.v1 import channels_pb2, channels_pb2_grpc, jobs_pb2, jobs_pb2_grpc



def _job_token(context: grpc.ServicerContext) -> str:
    """The job token the caller sent (JOB_TOKEN_HEADER), '' when none."""
    return str(dict(context.invocation_metadata() or ()).get(JOB_TOKEN_HEADER, ""))


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    """SubmitJob, GetJob, ListJobs, CancelJob, StreamJobEvents."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager

    @grpc_method
    def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        return convert.job_to_proto(self.manager.submit(convert.spec_from_proto(request.spec)))

    @grpc_method
    def GetJob(self, request: jobs_pb2.GetJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        return convert.job_to_proto(self.manager.get(request.job_id))

    @grpc_method
    def ListJobs(self, request: jobs_pb2.ListJobsRequest, context: grpc.ServicerContext) -> jobs_pb2.ListJobsResponse:
        states = {convert.state_from_proto(s) for s in request.states}
        jobs = self.manager.list(states or None, request.dataset)
        return jobs_pb2.ListJobsResponse(jobs=[convert.job_to_proto(job) for job in jobs])

    @grpc_method
    def CancelJob(self, request: jobs_pb2.CancelJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        return convert.job_to_proto(self.manager.cancel(request.job_id, request.reason))

    def StreamJobEvents(
        self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[jobs_pb2.JobEvent]:
        events = self._event_log(request, context)
        for event in events.follow(request.from_sequence, follow=request.follow, include_logs=request.include_logs,
                                   alive=context.is_active):  # fmt: skip
            yield convert.event_to_proto(event)

    @grpc_method
    def _event_log(self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext) -> JobEventLog:
        """The job's event log, or the stream aborts with NOT_FOUND for an unknown job."""
        return self.manager.events(request.job_id)


class ChannelServicer(channels_pb2_grpc.ChannelServiceServicer):
    """OpenChannel, ReleaseChannel."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager

    @grpc_method
    def OpenChannel(
        self, request: channels_pb2.OpenChannelRequest, context: grpc.ServicerContext
    ) -> channels_pb2.ChannelLayout:
        self.manager.table.check_token(request.job_id, _job_token(context), "opening a channel")
        grant = self.manager.open_channel(request.job_id, request.rank, request.trainer_pid)
        return grant_to_proto(grant)

    @grpc_method
    def ReleaseChannel(
        self, request: channels_pb2.ReleaseChannelRequest, context: grpc.ServicerContext
    ) -> channels_pb2.ReleaseChannelResponse:
        self.manager.table.check_token(request.job_id, _job_token(context), "releasing a channel")
        consumed = self.manager.release_channel(request.job_id, request.rank)
        return channels_pb2.ReleaseChannelResponse(batches_consumed=consumed)
