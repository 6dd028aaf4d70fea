"""JobTable: the states a job may take, cancellation requests, and which jobs hold a dataset."""

from __future__ import annotations

import pytest

from graphtier.contract.errors import DaemonError, UnknownJobError
from graphtier.contract.jobs.state import JobState
from graphtier.service.daemon.jobs.table import JobRecord, JobTable


def test_states_cancellation_and_dataset_users():
    table = JobTable()
    cancelled: list[tuple[str, str]] = []
    table.on_cancel(lambda job, reason: cancelled.append((job.job_id, reason)))
    table.add(JobRecord(job_id="a", dataset="d", world_size=2))
    table.add(JobRecord(job_id="b", dataset="d", world_size=1, state=JobState.RUNNING))
    assert table.jobs_using("d") == ["a", "b"] and table.jobs_using("other") == []
    assert [r.job_id for r in table.list()] == ["b", "a"]  # newest first

    assert table.request_cancel("b", "stop please").cancel_requested
    assert cancelled == [("b", "stop please")]
    done = table.set_state("b", JobState.CANCELLED)
    assert done.finished_at is not None and done.message == "stop please"
    assert table.jobs_using("d") == ["a"]
    with pytest.raises(DaemonError, match="has ended \\(cancelled\\); it cannot become running"):
        table.set_state("b", JobState.RUNNING)
    with pytest.raises(DaemonError, match="already ended"):
        table.request_cancel("b", "again")
    assert table.counts_by_state()[JobState.PENDING] == 1


def test_a_new_state_without_a_message_clears_the_old_one():
    """A message says why the job is in its state now: a queue's reason or a restart's announcement is not
    what a success says."""
    table = JobTable()
    table.add(JobRecord(job_id="a", dataset="d", world_size=2))
    assert table.set_state("a", JobState.PENDING, "queued: 2 cores held").message == "queued: 2 cores held"
    assert table.set_state("a", JobState.PENDING).message == "queued: 2 cores held"  # same state: kept
    assert table.set_state("a", JobState.STARTING).message == ""
    assert table.set_state("a", JobState.STARTING, "node lost; restart 1 of 1").message == "node lost; restart 1 of 1"
    assert table.set_state("a", JobState.RUNNING).message == ""
    assert table.set_state("a", JobState.SUCCEEDED).message == ""


def test_unknown_jobs_ranks_and_duplicates_are_refused():
    table = JobTable()
    table.add(JobRecord(job_id="a", dataset="d", world_size=2))
    with pytest.raises(UnknownJobError, match="no job 'zz' in this daemon \\(latest known: a\\)"):
        table.get("zz")
    with pytest.raises(UnknownJobError, match="ranks 0..1; there is no rank 2"):
        table.check_rank("a", 2)
    with pytest.raises(DaemonError, match="already exists"):
        table.add(JobRecord(job_id="a", dataset="d", world_size=1))
    with pytest.raises(DaemonError, match="world size 0"):
        table.add(JobRecord(job_id="c", dataset="d", world_size=0))


def test_yaml_booleans_are_not_numbers():
    from graphtier.contract.errors import InvalidRequestError
    from graphtier.contract.jobs.spec import JobSpec

    for values, field in (
        ({"dataset": "x", "epochs": True}, "epochs"),
        ({"dataset": "x", "fanouts": [5, False]}, "fanouts"),
    ):
        with pytest.raises(InvalidRequestError, match=rf"job.yaml: invalid job spec: {field}: .*expected a number"):
            JobSpec.build(values, source="job.yaml")


def test_the_table_writes_through_and_retires_ended_jobs_after_its_window(tmp_path):
    from datetime import timedelta

    table = JobTable(tmp_path, retire_after_s=60.0)
    assert table.path == tmp_path / "jobs.sqlite3"
    table.add(JobRecord(job_id="1", dataset="d", world_size=1), spec_json='{"dataset": "d"}')
    table.add(JobRecord(job_id="2", dataset="d", world_size=1))
    started = table.set_state("1", JobState.STARTING)
    assert started.started_at is not None and started.finished_at is None
    ended = table.set_state("1", JobState.SUCCEEDED, "done")
    table.keep_ended("1", b"job one")
    assert table.ended_message("1") == b"job one" and table.ended_message("2") == b""
    assert table.due_for_retirement(ended.finished_at + timedelta(seconds=59)) == []
    assert table.due_for_retirement(ended.finished_at + timedelta(seconds=60)) == ["1"]  # "2" has not ended
    table.retire("1", table.ended_message("1"))
    kept = table.stored("1")
    assert kept is not None and (kept.job_proto, kept.spec_json, kept.state) == (
        b"job one",
        '{"dataset": "d"}',
        "succeeded",
    )
    assert table.due_for_retirement(ended.finished_at + timedelta(days=1)) == []  # retired once
    table.close()
    table.close()  # idempotent

    again = JobTable(tmp_path)  # a later daemon: the history, "2" failed with its daemon gone
    assert again.restore(daemon_pid=-1) == ["2"]
    assert again.get("1").state == JobState.SUCCEEDED and again.stored("1").job_proto == b"job one"
    assert again.get("2").state == JobState.FAILED and "ended while the job was pending" in again.get("2").message
    assert again.next_numeric_id() == 3
    again.close()
