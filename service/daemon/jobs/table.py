"""`JobTable`: the jobs a daemon knows, their state, who asked to cancel them, and how long
an ended one is kept in full.

The job manager (which spawns torchrun and the producers) adds jobs here and moves them
through their states; the progress service checks reports against it, the dataset
registry asks it which jobs use a dataset, and the status app and metrics read it.
Thread-safe: gRPC calls arrive on many threads.

Given a directory, the table writes through to the job store there, a SQLite file
(`jobs.sqlite3`), so jobs outlive the daemon: one row per job, its record (state, message,
times), its spec as JSON and, once it has ended, the whole `Job` message as the contract
serialises it, and its owner (a table of its own, `job_owners`: a file of an earlier graphtier
gains it when opened, and its jobs have no recorded owner). `restore()`
reads the history back; a job that was not final in the file belonged to a daemon that died
and is marked failed with that cause. The schema is versioned (`meta.schema_version`); a file
of a newer version is refused rather than misread. Standard-library sqlite3, WAL journal:
readers never wait for the writer, and a crash mid-write loses at most the last change.

Besides the record, each job's curves (one `EpochRecord` per epoch, as its ranks report them:
`record_epoch`, `history`) and its exported model's state (`set_artifact`, `artifact`: kept,
expired by the artifact retention, or none) live here, written through as well (schema 2 added
them; a version-1 file is upgraded in place when opened).

Retention: an ended job is answered in full (progress, ranks, live metric series) for
`retire_after_s` (`graphtierd --job-retire`); after that `due_for_retirement` names it and
`retire` makes the table answer for it from its saved `Job` message alone.
"""

from __future__ import annotations

import builtins
import hmac
import json
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from graphtier.contract.environment import JOB_TOKEN_ENV
from graphtier.contract.errors import DaemonError, InvalidReportError, UnknownJobError
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.jobs.state import JobState, job_id_order
from graphtier.contract.jobs.view import JobArtifactInfo


def _now() -> datetime:
    return datetime.now(timezone.utc)


SCHEMA_VERSION = 2
STORE_FILE = "jobs.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    job_id      TEXT PRIMARY KEY,
    seq         INTEGER NOT NULL,
    name        TEXT NOT NULL,
    dataset     TEXT NOT NULL,
    world_size  INTEGER NOT NULL,
    state       TEXT NOT NULL,
    message     TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    finished_at TEXT,
    daemon_pid  INTEGER NOT NULL,
    spec_json   TEXT NOT NULL,
    job_proto   BLOB
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
CREATE TABLE IF NOT EXISTS job_epochs (
    job_id      TEXT NOT NULL,
    epoch       INTEGER NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (job_id, epoch)
);
CREATE TABLE IF NOT EXISTS job_artifacts (
    job_id      TEXT PRIMARY KEY,
    state       TEXT NOT NULL,
    message     TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    path        TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS job_owners (
    job_id      TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    uid         INTEGER
);
"""


@dataclass(frozen=True)
class StoredJob:
    """One row: the record's fields, the spec as JSON, the final Job message (bytes) if saved."""

    job_id: str
    name: str
    dataset: str
    world_size: int
    state: str
    message: str
    created_at: datetime
    finished_at: datetime | None
    daemon_pid: int
    spec_json: str
    job_proto: bytes | None


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


class _JobStoreFile:
    """The job history file of one daemon: the table's SQLite side (one connection, one lock)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / STORE_FILE
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            row = (
                self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if self._has_meta()
                else None
            )
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise DaemonError(
                    f"{self.path}: job store schema {row[0]} is newer than this graphtier's ({SCHEMA_VERSION}); "
                    "upgrade graphtier, or move the file away to start a new history"
                )
            self._db.executescript(_SCHEMA)  # a version-1 file gains the tables of version 2
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as exc:
            raise DaemonError(f"{self.path}: cannot open the job store ({exc}); move it away to start anew") from None
        self._lock = threading.Lock()

    def _has_meta(self) -> bool:
        return (
            self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
            is not None
        )

    def save_epoch(self, job_id: str, epoch: int, record_json: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO job_epochs (job_id, epoch, record_json) VALUES (?, ?, ?)",
                (job_id, epoch, record_json),
            )

    def epochs(self) -> list[tuple[str, int, str]]:
        with self._lock:
            return self._db.execute(
                "SELECT job_id, epoch, record_json FROM job_epochs ORDER BY job_id, epoch"
            ).fetchall()

    def save_artifact(self, job_id: str, state: str, message: str, nbytes: int, path: str) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO job_artifacts (job_id, state, message, bytes, path) VALUES (?, ?, ?, ?, ?)",
                (job_id, state, message, nbytes, path),
            )

    def artifacts(self) -> list[tuple[str, str, str, int, str]]:
        with self._lock:
            return self._db.execute("SELECT job_id, state, message, bytes, path FROM job_artifacts").fetchall()

    def insert(
        self,
        job_id: str,
        seq: int,
        *,
        name: str,
        dataset: str,
        world_size: int,
        state: str,
        message: str,
        created_at: datetime,
        daemon_pid: int,
        spec_json: str,
    ) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (job_id, seq, name, dataset, world_size, state, message, created_at, daemon_pid, "
                "spec_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, seq, name, dataset, world_size, state, message, created_at.isoformat(), daemon_pid, spec_json),
            )

    def insert_owner(self, job_id: str, owner: JobOwner) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO job_owners (job_id, name, uid) VALUES (?, ?, ?)",
                (job_id, owner.name, owner.uid),
            )

    def owners(self) -> dict[str, JobOwner]:
        with self._lock:
            rows = self._db.execute("SELECT job_id, name, uid FROM job_owners").fetchall()
        return {job_id: JobOwner(name, uid) for job_id, name, uid in rows}

    def update(self, job_id: str, *, state: str, message: str, finished_at: datetime | None) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE jobs SET state = ?, message = ?, finished_at = ? WHERE job_id = ?",
                (state, message, None if finished_at is None else finished_at.isoformat(), job_id),
            )

    def save_job(self, job_id: str, job_proto: bytes) -> None:
        """Keep the ended job's whole `Job` message (progress, result, ranks) for `job status` later."""
        with self._lock:
            self._db.execute("UPDATE jobs SET job_proto = ? WHERE job_id = ?", (job_proto, job_id))

    def mark_orphans(self, daemon_pid: int, final_states: tuple[str, ...], failed: str) -> list[str]:
        """Jobs that were not final when the daemon that ran them (not `daemon_pid`) died: failed now."""
        now = datetime.now(timezone.utc).isoformat()
        marks = ",".join("?" * len(final_states))
        with self._lock:
            rows = self._db.execute(
                f"SELECT job_id, state, daemon_pid FROM jobs WHERE state NOT IN ({marks}) AND daemon_pid != ?",
                (*final_states, daemon_pid),
            ).fetchall()
            for job_id, state, pid in rows:
                self._db.execute(
                    "UPDATE jobs SET state = ?, message = ?, finished_at = ? WHERE job_id = ?",
                    (
                        failed,
                        f"the daemon (pid {pid}) ended while the job was {state}; its processes went with it",
                        now,
                        job_id,
                    ),
                )
        return [row[0] for row in rows]

    def jobs(self) -> Iterator[StoredJob]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, name, dataset, world_size, state, message, created_at, finished_at, daemon_pid, "
                "spec_json, job_proto FROM jobs ORDER BY seq"
            ).fetchall()
        for r in rows:
            yield StoredJob(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                _time(r[6]) or datetime.now(timezone.utc),
                _time(r[7]),
                r[8],
                r[9],
                r[10],
            )

    def max_seq(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT MAX(seq) FROM jobs").fetchone()
        return int(row[0] or 0)

    def close(self) -> None:
        with self._lock:
            self._db.close()


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
    started_at: datetime | None = None  # when it left the queue (STARTING)
    finished_at: datetime | None = None
    cancel_requested: bool = False
    gpu_share: str = ""  # how the producers share the GPUs and why (GpuShare.describe); not kept past a restart
    owner: JobOwner | None = None  # the user the job belongs to (access.py); None: kept from before owners
    # Handed to the job's own processes only (JOB_TOKEN_ENV); progress reports must carry it.
    token: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)


CancelListener = Callable[[JobRecord, str], None]


class JobTable:
    """Every job of this daemon, by id; newest first when listed. Given a `directory`, every change
    is written through to its job file and `restore()` brings back the jobs of earlier daemons."""

    def __init__(self, directory: Path | None = None, *, retire_after_s: float = 600.0) -> None:
        self._lock = threading.RLock()
        self._jobs: dict[str, JobRecord] = {}
        self._cancel_listeners: list[CancelListener] = []
        self._file = _JobStoreFile(directory) if directory is not None else None
        self.retire_after_s = retire_after_s
        self._specs: dict[str, str] = {}  # this daemon's jobs' specs, as JSON
        self._ended: dict[str, bytes] = {}  # this daemon's ended jobs' Job messages, as kept
        self._stored: dict[str, StoredJob] = {}  # jobs answered from their saved Job message alone
        self._history: dict[str, dict[int, EpochRecord]] = {}  # each job's epoch records, by epoch
        self._artifacts: dict[str, JobArtifactInfo] = {}  # each ended job's exported model

    @property
    def path(self) -> Path | None:
        """The job file written through to (None: in memory only)."""
        return self._file.path if self._file is not None else None

    def close(self) -> None:
        """Close the job file (the daemon is stopping); idempotent."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def restore(self, daemon_pid: int) -> list[str]:
        """Load the history; jobs left unfinished by a daemon that died become failed. Their ids."""
        if self._file is None:
            return []
        final = tuple(s.value for s in JobState if s.final)
        orphans = self._file.mark_orphans(daemon_pid, final, JobState.FAILED.value)
        owners = self._file.owners()
        with self._lock:
            for job_id, epoch, record_json in self._file.epochs():
                self._history.setdefault(job_id, {})[epoch] = EpochRecord.from_json(json.loads(record_json))
            for job_id, state, message, nbytes, path in self._file.artifacts():
                self._artifacts[job_id] = JobArtifactInfo(state, message, nbytes, path)
            for row in self._file.jobs():
                self._stored[row.job_id] = row
                self._jobs[row.job_id] = JobRecord(
                    job_id=row.job_id,
                    dataset=row.dataset,
                    world_size=row.world_size,
                    name=row.name,
                    state=JobState(row.state),
                    message=row.message,
                    created_at=row.created_at,
                    finished_at=row.finished_at,
                    token="",
                    owner=owners.get(row.job_id),
                )
        return orphans

    def stored(self, job_id: str) -> StoredJob | None:
        """What is kept of a job answered from its saved Job message: one of an earlier daemon, or
        one of this daemon's that was retired (None for this daemon's other jobs)."""
        with self._lock:
            return self._stored.get(job_id)

    def keep_ended(self, job_id: str, job_proto: bytes) -> None:
        """Keep an ended job's whole `Job` message (progress, result, ranks) for `job status` later:
        written through to the job file, and what the job is answered from once it is retired."""
        with self._lock:
            self._ended[job_id] = job_proto
            if self._file is not None:
                self._file.save_job(job_id, job_proto)

    def due_for_retirement(self, now: datetime | None = None) -> list[str]:
        """This daemon's jobs that ended more than `retire_after_s` ago and are not yet retired."""
        now = now or _now()
        with self._lock:
            return sorted(
                (
                    r.job_id
                    for r in self._jobs.values()
                    if r.state.final
                    and r.finished_at is not None
                    and r.job_id not in self._stored
                    and (now - r.finished_at).total_seconds() >= self.retire_after_s
                ),
                key=job_id_order,
            )

    def ended_message(self, job_id: str) -> bytes:
        """The Job message kept for an ended job of this daemon (b"" when none was kept)."""
        with self._lock:
            return self._ended.get(job_id, b"")

    def retire(self, job_id: str, job_proto: bytes) -> None:
        """From now on answer for an ended job of this daemon from `job_proto`, its saved Job message."""
        with self._lock:
            record = self._jobs[job_id]
            self._stored[job_id] = StoredJob(
                job_id=job_id,
                name=record.name,
                dataset=record.dataset,
                world_size=record.world_size,
                state=record.state.value,
                message=record.message,
                created_at=record.created_at,
                finished_at=record.finished_at,
                daemon_pid=os.getpid(),
                spec_json=self._specs.get(job_id, "{}"),
                job_proto=job_proto,
            )
            self._ended.pop(job_id, None)

    def record_epoch(self, job_id: str, record: EpochRecord) -> bool:
        """Keep an epoch's record of job `job_id`, merged into what is kept of that epoch (its ranks report
        the same record; an evaluation arrives after the training figures); True when it changed anything."""
        with self._lock:
            self.get(job_id)  # UnknownJobError naming the id
            epochs = self._history.setdefault(job_id, {})
            kept = epochs.get(record.epoch)
            merged = kept.merged(record) if kept is not None else record
            if merged == kept:
                return False
            epochs[record.epoch] = merged
            if self._file is not None:
                self._file.save_epoch(job_id, record.epoch, json.dumps(merged.to_json()))
            return True

    def history(self, job_id: str) -> list[EpochRecord]:
        """Job `job_id`'s epoch records, in order (empty before its first epoch ends); UnknownJobError for a job
        it does not know."""
        with self._lock:
            self.get(job_id)
            epochs = self._history.get(job_id, {})
            return [epochs[e] for e in sorted(epochs)]

    def set_artifact(self, job_id: str, artifact: JobArtifactInfo) -> None:
        """Record the state of job `job_id`'s exported model (kept, expired or none)."""
        with self._lock:
            self.get(job_id)
            self._artifacts[job_id] = artifact
            if self._file is not None:
                self._file.save_artifact(job_id, artifact.state, artifact.message, artifact.bytes, artifact.path)

    def artifact(self, job_id: str) -> JobArtifactInfo | None:
        """The state of job `job_id`'s exported model; None before the job has ended."""
        with self._lock:
            return self._artifacts.get(job_id)

    def artifacts(self) -> dict[str, JobArtifactInfo]:
        """Every ended job's exported model state, by job id."""
        with self._lock:
            return dict(self._artifacts)

    def add(self, record: JobRecord, spec_json: str = "{}") -> JobRecord:
        """Register a new job; DaemonError if its id is taken or its world size is not positive."""
        if record.world_size < 1:
            raise DaemonError(f"job {record.job_id!r}: world size {record.world_size} must be at least 1")
        with self._lock:
            if record.job_id in self._jobs:
                raise DaemonError(f"a job with id {record.job_id!r} already exists")
            self._jobs[record.job_id] = record
            self._specs[record.job_id] = spec_json
            if self._file is not None:
                seq = int(record.job_id) if record.job_id.isdigit() else self._file.max_seq() + 1
                self._file.insert(
                    record.job_id,
                    seq,
                    name=record.name,
                    dataset=record.dataset,
                    world_size=record.world_size,
                    state=record.state.value,
                    message=record.message,
                    created_at=record.created_at,
                    daemon_pid=os.getpid(),
                    spec_json=spec_json,
                )
                if record.owner is not None:
                    self._file.insert_owner(record.job_id, record.owner)
        return record

    def _write(self, record: JobRecord) -> None:
        if self._file is not None:
            self._file.update(
                record.job_id, state=record.state.value, message=record.message, finished_at=record.finished_at
            )

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
            raise InvalidReportError(
                f"progress for job {job_id!r} refused: the job has {record.state.value}; "
                "a finished job's results are final"
            )
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
        """Move a job to `state` with `message`, why it is there; a final state is never left (DaemonError).
        A new state without a message clears the old one (a restart's announcement is not a success's
        message); the same state, or a job whose cancel is pending, keeps it."""
        with self._lock:
            record = self.get(job_id)
            if record.state.final and state != record.state:
                raise DaemonError(f"job {job_id!r} has ended ({record.state.value}); it cannot become {state.value}")
            if not message and (state == record.state or record.cancel_requested):
                message = record.message
            finished = _now() if state.final and record.finished_at is None else record.finished_at
            started = _now() if state == JobState.STARTING and record.started_at is None else record.started_at
            updated = replace(record, state=state, message=message, started_at=started, finished_at=finished)
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

    def jobs_using(self, dataset: str) -> builtins.list[str]:  # `list` is a method here
        """Ids of the jobs on `dataset` that have not ended."""
        with self._lock:
            return sorted(
                (r.job_id for r in self._jobs.values() if r.dataset == dataset and not r.state.final), key=job_id_order
            )

    def counts_by_state(self) -> dict[JobState, int]:
        with self._lock:
            counts = dict.fromkeys(JobState, 0)
            for record in self._jobs.values():
                counts[record.state] += 1
            return counts
