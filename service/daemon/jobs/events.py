"""`JobEventLog`: one job's ordered events, kept for replay and followed by streams.

Sequence numbers start at 0 without gaps, so a client that reconnects with its last
sequence + 1 misses nothing still kept. Log lines are bounded (the oldest are dropped
first, never state changes); a follower blocks on a condition until new events arrive or
the log is closed (the job ended).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

from graphtier.contract.errors import DaemonError
from graphtier.contract.jobs.view import JobEvent, JobProgressInfo, LogLine, StateChange

MAX_EVENTS = 20_000


class JobEventLog:
    """Append-only, thread-safe; `follow()` yields events as they come until `close()`."""

    def __init__(self, job_id: str, *, max_events: int = MAX_EVENTS) -> None:
        self.job_id = job_id
        self._max = max_events
        self._events: list[JobEvent] = []
        self._next = 0  # sequence of the next event
        self._closed = False
        self._cond = threading.Condition()

    def _append(
        self,
        *,
        state_change: StateChange | None = None,
        progress: JobProgressInfo | None = None,
        log: LogLine | None = None,
    ) -> JobEvent:
        with self._cond:
            event = JobEvent(
                sequence=self._next,
                time=datetime.now(timezone.utc),
                job_id=self.job_id,
                state_change=state_change,
                progress=progress,
                log=log,
            )
            self._next += 1
            self._events.append(event)
            if len(self._events) > self._max:
                drop = next((i for i, e in enumerate(self._events) if e.log is not None), None)
                if drop is not None:
                    del self._events[drop]  # the oldest log line; state changes and progress stay
            self._cond.notify_all()
            return event

    def state(self, change: StateChange) -> JobEvent:
        return self._append(state_change=change)

    def progress(self, progress: JobProgressInfo) -> JobEvent:
        return self._append(progress=progress)

    def log(self, line: LogLine) -> JobEvent:
        return self._append(log=line)

    def close(self) -> None:
        """No more events: followers finish once they have sent what is kept."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def since(self, sequence: int) -> list[JobEvent]:
        with self._cond:
            return [e for e in self._events if e.sequence >= sequence]

    def follow(
        self,
        from_sequence: int = 0,
        *,
        follow: bool = True,
        include_logs: bool = True,
        alive: Callable[[], bool] = lambda: True,
    ) -> Iterator[JobEvent]:
        """Events from `from_sequence` on; with `follow`, wait for more until the log closes or
        `alive()` turns false (the client went away)."""
        next_seq = from_sequence
        while True:
            with self._cond:
                pending = [e for e in self._events if e.sequence >= next_seq]
                if not pending:
                    if self._closed or not follow or not alive():
                        return
                    self._cond.wait(0.5)
                    continue
            for event in pending:
                next_seq = event.sequence + 1
                if event.log is None or include_logs:
                    yield event
            if not follow:
                return


RANK_PREFIX = re.compile(r"^\[rank ?(\d+)\]")  # how torchrun's --tee prefixes a rank's lines in the job log


def ended_job_log(job_id: str, log_path: Path) -> JobEventLog:
    """A closed event log of the lines of an ended job's log file (the job is no longer supervised,
    so its events are gone but its output is on disk); DaemonError naming the file if it is missing."""
    try:
        text = log_path.read_text(errors="replace")
    except FileNotFoundError:
        raise DaemonError(f"job {job_id!r} has ended and its log {log_path} is gone") from None
    except OSError as exc:
        raise DaemonError(f"job {job_id!r}: cannot read its log {log_path}: {exc.strerror or exc}") from None
    events = JobEventLog(job_id)
    for line in text.splitlines():
        match = RANK_PREFIX.match(line)
        events.log(LogLine(text=line, rank=int(match.group(1)) if match else None))
    events.close()
    return events
