"""A job's state as every side names it, its id order, and how its processes prove who they are."""

from __future__ import annotations

from enum import Enum


class JobState(str, Enum):
    """Where a job is in its life; the last three are final."""

    PENDING = "pending"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


def job_id_order(job_id: str) -> tuple[int, int | str]:
    """Sort key for job ids: numeric ids by number (2 before 10), any other after, by text."""
    return (0, int(job_id)) if job_id.isdigit() else (1, job_id)


# The header a job's processes send their job token in (`environment.JOB_TOKEN_ENV`).
JOB_TOKEN_HEADER = "graphtier-job-token"
