"""`JobTable`: the jobs a daemon knows, their state, and who asked to cancel them.

The job manager (which spawns torchrun and the producers) adds jobs here and moves them
through their states; the progress service checks reports against it, the dataset
registry asks it which jobs use a dataset, and the status app and metrics read it.
Thread-safe: gRPC calls arrive on many threads.
"""

from __future__ import annotations

import hmac
import os
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from graphtier.contract.errors import DaemonError, InvalidReportError, UnknownJobError
from graphtier.contract.environment import JOB_TOKEN_ENV
from graphtier.contract.jobs.state import JobState, job_id_order
from graphtier.service.daemon.jobs.store import JobStore, StoredJob


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class JobRecord:
    """One job as the daemon keeps it (a snapshot: the table hands out copies)."""

    job_id: str
    dataset: str
    world_size: int
    name: str = ""
    state: JobState = JobState.PENDING
    message: str = ""
    created_at: datetime = field(default_factory=_now)
    finished_at: datetime | None = None
    cancel_requested: bool = False
    # Handed to the job's own processes only (JOB_TOKEN_ENV); progress reports must carry it.
    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)


CancelListener = Callable[[JobRecord, str], None]


class JobTable:
    """Every job of this daemon, by id; newest first when listed. With a `JobStore`, every change
    is written through and `restore()` brings back the jobs of earlier daemons."""

    def __init__(self, store: JobStore | None = None) -> None:
        self._lock = threading.RLock()
        self._jobs: dict[str, JobRecord] = {}
        self._cancel_listeners: list[CancelListener] = []
        self.store = store
        self._stored: dict[str, StoredJob] = {}  # jobs of earlier daemons, as the store kept them

    def restore(self, daemon_pid: int) -> list[str]:
        """Load the history; jobs left unfinished by a daemon that died become failed. Their ids."""
        if self.store is None:
            return []
        final = tuple(s.value for s in JobState if s.final)
        orphans = self.store.mark_orphans(daemon_pid, final, JobState.FAILED.value)
        with self._lock:
            for row in self.store.jobs():
                self._stored[row.job_id] = row
                self._jobs[row.job_id] = JobRecord(
                    job_id=row.job_id, dataset=row.dataset, world_size=row.world_size, name=row.name,
                    state=JobState(row.state), message=row.message, created_at=row.created_at,
                    finished_at=row.finished_at, token="",
                )  # fmt: skip
        return orphans

    def stored(self, job_id: str) -> StoredJob | None:
        """What the store kept of a job of an earlier daemon (None for this daemon's jobs)."""
        with self._lock:
            return self._stored.get(job_id)

    def remember(self, job_id: str, job_proto: bytes, spec_json: str) -> None:
        """From now on answer for an ended job of this daemon from its saved Job message."""
        with self._lock:
            record = self._jobs[job_id]
            self._stored[job_id] = StoredJob(
                job_id=job_id, name=record.name, dataset=record.dataset, world_size=record.world_size,
                state=record.state.value, message=record.message, created_at=record.created_at,
                finished_at=record.finished_at, daemon_pid=os.getpid(), spec_json=spec_json, job_proto=job_proto,
            )  # fmt: skip

    def save_job(self, job_id: str, job_proto: bytes) -> None:
        if self.store is not None:
            self.store.save_job(job_id, job_proto)

    def add(self, record: JobRecord, spec_json: str = "{}") -> JobRecord:
        """Register a new job; DaemonError if its id is taken or its world size is not positive."""
        if record.world_size < 1:
            raise DaemonError(f"job {record.job_id!r}: world size {record.world_size} must be at least 1")
        with self._lock:
            if record.job_id in self._jobs:
                raise DaemonError(f"a job with id {record.job_id!r} already exists")
            self._jobs[record.job_id] = record
            if self.store is not None:
                seq = int(record.job_id) if record.job_id.isdigit() else self.store.max_seq() + 1
                self.store.insert(record.job_id, seq, name=record.name, dataset=record.dataset,
                                  world_size=record.world_size, state=record.state.value, message=record.message,
                                  created_at=record.created_at, daemon_pid=os.getpid(), spec_json=spec_json)  # fmt: skip
        return record

    def _write(self, record: JobRecord) -> None:
        if self.store is not None:
            self.store.update(record.job_id, state=record.state.value, message=record.message,
                              finished_at=record.finished_at)  # fmt: skip

    def next_numeric_id(self) -> int:
        """One more than the largest numeric job id known (this daemon's or an earlier one's)."""
        with self._lock:
            return max((int(j) for j in self._jobs if j.isdigit()), default=0) + 1

    def get(self, job_id: str) -> JobRecord:
        with self._lock:
            record = self._jobs.get(job_id)
            if record is None:
                known = ", ".join(sorted(self._jobs, key=job_id_order)[-5:]) or "none"
                raise UnknownJobError(f"no job {job_id!r} in this daemon (latest known: {known})")
            return record

    def check_token(self, job_id: str, token: str, what: str, verb: str = "do that") -> JobRecord:
        """The job, if `token` is the one its processes were given; InvalidReportError naming `what`
        otherwise (another process of this user, or anyone on TCP, cannot act for a job)."""
        record = self.get(job_id)
        if not record.token or not hmac.compare_digest(token.encode(), record.token.encode()):
            raise InvalidReportError(
                f"{what} for job {job_id!r} refused: only the job's own processes may {verb} "
                f"({'no' if not token else 'a wrong'} job token; they get ${JOB_TOKEN_ENV} from the daemon)"
            )
        return record

    def check_reporter(self, job_id: str, token: str) -> JobRecord:
        """`check_token` for a progress report, which a finished job no longer takes."""
        record = self.check_token(job_id, token, "progress", "report it")
        if record.state.final:
            raise InvalidReportError(f"progress for job {job_id!r} refused: the job has {record.state.value}; "
                                     "a finished job's results are final")  # fmt: skip
        return record

    def check_rank(self, job_id: str, rank: int) -> JobRecord:
        """The job, if `rank` is one of its ranks; UnknownJobError otherwise."""
        record = self.get(job_id)
        if not 0 <= rank < record.world_size:
            raise UnknownJobError(f"job {job_id!r} has ranks 0..{record.world_size - 1}; there is no rank {rank}")
        return record

    def list(self) -> list[JobRecord]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda r: r.created_at, reverse=True)

    def set_state(self, job_id: str, state: JobState, message: str = "") -> JobRecord:
        """Move a job to `state`; a final state is never left (DaemonError)."""
        with self._lock:
            record = self.get(job_id)
            if record.state.final and state != record.state:
                raise DaemonError(f"job {job_id!r} has ended ({record.state.value}); it cannot become {state.value}")
            finished = _now() if state.final and record.finished_at is None else record.finished_at
            updated = replace(record, state=state, message=message or record.message, finished_at=finished)
            self._jobs[job_id] = updated
            self._write(updated)
            return updated

    def on_cancel(self, listener: CancelListener) -> None:
        """Call `listener(job, reason)` whenever a job's cancellation is requested (the job manager stops it)."""
        with self._lock:
            self._cancel_listeners.append(listener)

    def request_cancel(self, job_id: str, reason: str) -> JobRecord:
        """Mark a running job for cancellation: its reporters are told so in every ack."""
        with self._lock:
            record = self.get(job_id)
            if record.state.final:
                raise DaemonError(f"job {job_id!r} has already ended ({record.state.value})")
            updated = replace(record, cancel_requested=True, message=reason or record.message)
            self._jobs[job_id] = updated
            self._write(updated)
            listeners = list(self._cancel_listeners)
        for listener in listeners:
            listener(updated, reason)
        return updated

    def jobs_using(self, dataset: str) -> list[str]:
        """Ids of the jobs on `dataset` that have not ended."""
        with self._lock:
            return sorted((r.job_id for r in self._jobs.values() if r.dataset == dataset and not r.state.final),
                          key=job_id_order)  # fmt: skip

    def counts_by_state(self) -> dict[JobState, int]:
        with self._lock:
            counts = dict.fromkeys(JobState, 0)
            for record in self._jobs.values():
                counts[record.state] += 1
            return counts
