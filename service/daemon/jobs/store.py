"""`JobStore`: the daemon's jobs in SQLite, so they outlive the daemon.

One row per job: its record (state, message, times), its spec as JSON and, once it has ended,
the whole `Job` message as the contract serialises it. The daemon writes through on every
change; at start it reads the history back, and a job that was not final in the file belonged
to a daemon that died: it is marked failed with that cause. The schema is versioned
(`meta.schema_version`); a file of a newer version is refused rather than misread.
Standard-library sqlite3, WAL journal: readers never wait for the writer, and a crash
mid-write loses at most the last change, never the file.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from graphtier.contract.errors import DaemonError

SCHEMA_VERSION = 1
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


class JobStore:
    """The job history file of one daemon; thread-safe (one connection, one lock)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / STORE_FILE
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise DaemonError(
                    f"{self.path}: job store schema {row[0]} is newer than this graphtier's ({SCHEMA_VERSION}); "
                    "upgrade graphtier, or move the file away to start a new history"
                )
        except sqlite3.DatabaseError as exc:
            raise DaemonError(f"{self.path}: cannot open the job store ({exc}); move it away to start anew") from None
        self._lock = threading.Lock()

    def insert(self, job_id: str, seq: int, *, name: str, dataset: str, world_size: int, state: str, message: str,
               created_at: datetime, daemon_pid: int, spec_json: str) -> None:  # fmt: skip
        with self._lock:
            self._db.execute(
                "INSERT INTO jobs (job_id, seq, name, dataset, world_size, state, message, created_at, daemon_pid, "
                "spec_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job_id, seq, name, dataset, world_size, state, message, created_at.isoformat(), daemon_pid,
                 spec_json),
            )  # fmt: skip

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
                    (failed, f"the daemon (pid {pid}) ended while the job was {state}; its processes went with it",
                     now, job_id),
                )  # fmt: skip
        return [row[0] for row in rows]

    def jobs(self) -> Iterator[StoredJob]:
        with self._lock:
            rows = self._db.execute(
                "SELECT job_id, name, dataset, world_size, state, message, created_at, finished_at, daemon_pid, "
                "spec_json, job_proto FROM jobs ORDER BY seq"
            ).fetchall()
        for r in rows:
            yield StoredJob(r[0], r[1], r[2], r[3], r[4], r[5], _time(r[6]) or datetime.now(timezone.utc), _time(r[7]),
                            r[8], r[9], r[10])  # fmt: skip

    def max_seq(self) -> int:
        with self._lock:
            row = self._db.execute("SELECT MAX(seq) FROM jobs").fetchone()
        return int(row[0] or 0)

    def close(self) -> None:
        with self._lock:
            self._db.close()
