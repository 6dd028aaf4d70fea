"""The JobService and ChannelService servicers: proto in, `JobManager` call, proto out.

Conversions live in `graphtier.contract.jobs.conversions`; errors become status codes in `grpc_status.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from graphtier.contract.errors import DaemonError, InvalidRequestError, UnknownJobError
from graphtier.contract.jobs import conversions as convert
from graphtier.contract.jobs.state import JOB_TOKEN_HEADER
from graphtier.service.daemon.jobs.events import JobEventLog
from graphtier.service.daemon.jobs.external_launch import ExternalLaunch
from graphtier.service.daemon.jobs.manager import JobManager
from graphtier.service.daemon.jobs.table import JobRecord
from graphtier.service.daemon.rpc.access import Access
from graphtier.service.daemon.rpc.grpc_status import grpc_method
from graphtier.service.pipeline.wire import grant_to_proto
from graphtier.service.shm.naming import process_start_time
from graphtier.v1 import channels_pb2, channels_pb2_grpc, jobs_pb2, jobs_pb2_grpc

if TYPE_CHECKING:
    from graphtier.service.daemon.cluster.node import ClusterNode
    from graphtier.service.daemon.cluster.peer_client import PeerClient

EXPORT_CHUNK_BYTES = 1 << 20  # an exported model is sent in pieces of this size (gRPC's default limit is 4 MiB)


MIN_SECRET_CHARS = 32  # a launch's secret: 128 bits and more, hex


def _job_token(context: grpc.ServicerContext) -> str:
    """The job token the caller sent (JOB_TOKEN_HEADER), '' when none."""
    return str(dict(context.invocation_metadata() or ()).get(JOB_TOKEN_HEADER, ""))


class EventStreamSlots:
    """The followed event streams open at once, at most `limit`.

    A followed StreamJobEvents call holds its server thread while it waits for the next event; the
    server's pool has `limit` threads for them beyond the workers that serve every other call, and this
    cap keeps the streams inside their share, so however many are open, GetJob, ReportProgress and the
    rest still find a free worker. Threads rather than an asyncio server: a waiting stream costs a
    thread parked on a condition (no CPU), and every servicer stays the plain code it is.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._free = threading.BoundedSemaphore(limit)

    @contextlib.contextmanager
    def hold(self, context: grpc.ServicerContext) -> Iterator[None]:
        """One slot for the stream's lifetime; the call is refused (RESOURCE_EXHAUSTED) when none is free."""
        if not self._free.acquire(blocking=False):
            context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this daemon already follows {self.limit} job event streams (job logs --follow), its "
                "--max-event-streams; close some, or start it with a higher limit",
            )
        try:
            yield
        finally:
            self._free.release()


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    """SubmitJob, AttachJob, GetJob, ListJobs, CancelJob, StreamJobEvents, ExportJob."""

    def __init__(
        self, manager: JobManager, streams: EventStreamSlots, access: Access, cluster: ClusterNode | None = None
    ) -> None:
        self.manager, self.cluster, self.streams, self.access = manager, cluster, streams, access

    @grpc_method
    def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: grpc.ServicerContext) -> jobs_pb2.Job:
        spec = convert.spec_from_proto(request.spec)
        caller = self.access.user(context, "SubmitJob")
        if spec.script:  # the daemon's ranks run it as the daemon's user
            self.access.admin(
                context,
                f"a job running script {spec.script} as the daemon's user "
                "(run it under your own torchrun or python with graphtier.connect() instead)",
            )
        assert caller.user is not None
        if spec.from_job:  # an inference job applies that job's exported model: the model is its owner's
            # an unknown job is the spec's error, which submitting names (job spec: from_job '...': no such job)
            with contextlib.suppress(UnknownJobError):
                self.access.job(context, spec.from_job, "applying the model of")
        if spec.ids:  # the daemon reads it for the caller: only a file the caller could read itself
            self.access.check_readable(caller, Path(spec.ids), "job spec: ids")
        if spec.multi_node and self.cluster is not None:
            return convert.job_to_proto(self.cluster.submit(spec, caller.user))
        return convert.job_to_proto(self.manager.submit(spec, caller.user))

    @grpc_method
    def AttachJob(
        self, request: jobs_pb2.AttachJobRequest, context: grpc.ServicerContext
    ) -> jobs_pb2.AttachJobResponse:
        spec = convert.spec_from_proto(request.spec)
        if not request.launch_id or len(request.launch_id) > 512:
            raise InvalidRequestError(f"AttachJob: launch_id {request.launch_id[:100]!r} must be 1-512 characters")
        if not MIN_SECRET_CHARS <= len(request.launch_secret) <= 512:
            raise InvalidRequestError(
                f"AttachJob: launch_secret must be {MIN_SECRET_CHARS}-512 characters (the secret the launch's ranks "
                f"share), got {len(request.launch_secret)}; a launch id alone joins no job"
            )
        caller = self.access.user(context, "AttachJob")
        assert caller.user is not None
        agent = int(request.agent_pid)
        start = process_start_time(agent) if agent > 0 else None
        if start is None:  # not visible here (another PID namespace): not watched
            agent = 0
        launch = ExternalLaunch(
            launch_id=request.launch_id,
            node_rank=request.node_rank,
            agent_pid=agent,
            agent_start=start,
            secret_digest=hashlib.sha256(request.launch_secret.encode()).hexdigest(),
        )

        def may_join(record: JobRecord) -> None:
            self.access.check_owner(caller, record.job_id, record.owner, "attaching to")

        job, token = self.manager.attach(spec, launch, caller.user, may_join)
        return jobs_pb2.AttachJobResponse(job=convert.job_to_proto(job), job_token=token)

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
        self.access.job(context, request.job_id, "cancelling")
        return convert.job_to_proto(self.manager.cancel(request.job_id, request.reason))

    def ExportJob(
        self, request: jobs_pb2.ExportJobRequest, context: grpc.ServicerContext
    ) -> Iterator[jobs_pb2.ArtifactChunk]:
        for name, path in self._export_files(request, context):
            try:
                with open(path, "rb") as f:
                    size, offset = os.fstat(f.fileno()).st_size, 0
                    while True:
                        data = f.read(min(EXPORT_CHUNK_BYTES, size - offset))
                        yield jobs_pb2.ArtifactChunk(path=name, offset=offset, data=data, size=size)
                        offset += len(data)
                        if offset >= size or not data:
                            break
            except OSError as exc:
                context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"job {request.job_id}'s exported model went away while it was sent ({path}: {exc.strerror})",
                )

    @grpc_method
    def _export_files(self, request: jobs_pb2.ExportJobRequest, context: grpc.ServicerContext) -> list:
        """(name, path) of the files of the job's exported model, or the call aborts naming why there are none
        (PERMISSION_DENIED for another user's job)."""
        self.access.job(context, request.job_id, "exporting the model of")
        return self.manager.artifacts.export_files(request.job_id)

    def StreamJobEvents(
        self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[jobs_pb2.JobEvent]:
        if not request.follow:  # ends as soon as the events so far are sent: no slot needed
            yield from self._events(request, context)
            return
        with self.streams.hold(context):
            yield from self._events(request, context)

    def _events(
        self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[jobs_pb2.JobEvent]:
        if request.node:
            yield from self._node_events(request, context)
            return
        events = self._event_log(request, context)
        for event in events.follow(
            request.from_sequence, follow=request.follow, include_logs=request.include_logs, alive=context.is_active
        ):
            yield convert.event_to_proto(event)

    def _node_events(
        self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext
    ) -> Iterator[jobs_pb2.JobEvent]:
        """A multi-node job's events on one of its nodes, relayed from that node's daemon."""
        part = self._part(request, context)
        if part is None:  # this daemon's own part
            forwarded = jobs_pb2.StreamJobEventsRequest()
            forwarded.CopyFrom(request)
            forwarded.node = ""
            yield from self._events(forwarded, context)
            return
        client, job_id = part
        forwarded = jobs_pb2.StreamJobEventsRequest(
            job_id=job_id, from_sequence=request.from_sequence, follow=request.follow, include_logs=request.include_logs
        )
        try:
            for event in client.job_events(forwarded):
                if not context.is_active():
                    return
                yield event
        except DaemonError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))

    @grpc_method
    def _part(
        self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext
    ) -> tuple[PeerClient, str] | None:
        """(client, job id there) of the node `request.node` names in the job, None for this daemon."""
        self.access.job(context, request.job_id, "reading the events and logs of")
        job = self.manager.get(request.job_id)
        for node in job.nodes:
            if request.node in (node.node, node.address):
                if node.node_rank == 0:
                    return None
                assert self.cluster is not None and self.cluster.cluster is not None
                return self.cluster.cluster.client(node.address), node.job_id
        names = ", ".join(n.node for n in job.nodes) or "none: it is not a multi-node job coordinated here"
        raise InvalidRequestError(f"job {request.job_id} has no part on node {request.node!r} (its nodes: {names})")

    @grpc_method
    def _event_log(self, request: jobs_pb2.StreamJobEventsRequest, context: grpc.ServicerContext) -> JobEventLog:
        """The job's event log, or the stream aborts: NOT_FOUND for an unknown job, PERMISSION_DENIED for
        another user's."""
        self.access.job(context, request.job_id, "reading the events and logs of")
        return self.manager.events(request.job_id)


class ChannelServicer(channels_pb2_grpc.ChannelServiceServicer):
    """OpenChannel, ReleaseChannel."""

    def __init__(self, manager: JobManager, access: Access) -> None:
        self.manager, self.access = manager, access

    @grpc_method
    def OpenChannel(
        self, request: channels_pb2.OpenChannelRequest, context: grpc.ServicerContext
    ) -> channels_pb2.ChannelLayout:
        self.access.job(context, request.job_id, "opening a channel of")
        self.manager.table.check_token(request.job_id, _job_token(context), "opening a channel")
        grant = self.manager.open_channel(request.job_id, request.rank, request.trainer_pid)
        return grant_to_proto(grant)

    @grpc_method
    def ReleaseChannel(
        self, request: channels_pb2.ReleaseChannelRequest, context: grpc.ServicerContext
    ) -> channels_pb2.ReleaseChannelResponse:
        self.access.job(context, request.job_id, "releasing a channel of")
        self.manager.table.check_token(request.job_id, _job_token(context), "releasing a channel")
        consumed = self.manager.release_channel(request.job_id, request.rank)
        return channels_pb2.ReleaseChannelResponse(batches_consumed=consumed)
