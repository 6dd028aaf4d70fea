"""Followed event streams never starve other calls: with every stream slot taken and few workers,
GetJob and ListJobs still answer at once, and one stream more is refused naming the limit."""

from __future__ import annotations

import threading
import time

import grpc

from graphtier.contract.identity import identity_socket_path
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.client.session import SessionSource
from graphtier.v1 import jobs_pb2, jobs_pb2_grpc

STREAMS = 12  # six times the daemon's two workers: before streams had their own threads, two starved it


def test_many_followed_streams_leave_unary_calls_answering(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent, "--grpc-workers", "2", "--max-event-streams", str(STREAMS))
    endpoints = daemon.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=256, hidden=16, epochs=200, nproc_per_node=1)
    channels = [grpc.insecure_channel(endpoints.grpc_target) for _ in range(STREAMS + 1)]
    session = SessionSource(identity_socket_path(endpoints.grpc_unix)).metadata()  # the job's owner, as its client
    first_events = [threading.Event() for _ in range(STREAMS)]
    ended: list[str] = []

    def follow(i: int, job_id: str) -> None:
        request = jobs_pb2.StreamJobEventsRequest(job_id=job_id, follow=True, include_logs=True)
        try:
            for _ in jobs_pb2_grpc.JobServiceStub(channels[i]).StreamJobEvents(request, metadata=session):
                first_events[i].set()
        except grpc.RpcError as exc:
            ended.append(exc.code().name)
            return
        ended.append("end")

    with DaemonClient(endpoints.grpc_target) as client:
        job_id = client.submit_job(spec).job_id
        followers = [threading.Thread(target=follow, args=(i, job_id), daemon=True) for i in range(STREAMS)]
        try:
            for thread in followers:
                thread.start()
            assert all(event.wait(60) for event in first_events), "a follower got no event"
            for _ in range(5):  # every stream slot is held: the two workers still answer at once
                started = time.monotonic()
                assert client.get_job(job_id).state in (JobState.STARTING, JobState.RUNNING)
                assert [j.job_id for j in client.list_jobs()] == [job_id]
                assert time.monotonic() - started < 2.0
            extra = jobs_pb2_grpc.JobServiceStub(channels[STREAMS]).StreamJobEvents(
                jobs_pb2.StreamJobEventsRequest(job_id=job_id, follow=True), timeout=30, metadata=session
            )
            try:
                next(iter(extra))
                raise AssertionError("a stream beyond --max-event-streams was served")
            except grpc.RpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert f"already follows {STREAMS} job event streams" in exc.details()
                assert "--max-event-streams" in exc.details()
        finally:
            client.cancel_job(job_id, "test over")
            for thread in followers:
                thread.join(60)
            for channel in channels:
                channel.close()
    assert ended == ["end"] * STREAMS  # each stream ended with the job, none was cut
