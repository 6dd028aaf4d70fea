"""`Admission`: a queue in front of the machine. A job starts when it fits, else waits in order.

Submitting twenty jobs at once used to start all twenty at once, whatever the machine had. Each
job asks for cores (one per rank: ranks compute, producers mostly wait on memory), memory (its
ranks', producers', agent's and slots' footprint, memory_need.py) and, for CUDA jobs, GPUs. A
job starts when every earlier queued job has started, the running jobs are fewer than
`max_running` (0 = no limit), and its demand fits what the running jobs leave: cores up to
`core_oversubscription` times the machine's, memory the machine has available now, GPUs the
machine has. A job larger than the machine still runs, alone. Under the daemon's memory limit
(`limit_room`: what the limit leaves beside the daemon and its datasets now) the running jobs'
memory and the new job's must fit in it as well (a job's memory is then its need under the
limit, memory_need.py). While it waits, `why()` says what it waits for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Demand:
    """What one job needs while it runs."""

    cores: int
    memory_bytes: int
    gpus: int = 0

    def __add__(self, other: Demand) -> Demand:
        return Demand(self.cores + other.cores, self.memory_bytes + other.memory_bytes, self.gpus + other.gpus)


@dataclass(frozen=True)
class Capacity:
    cores: int
    gpus: int
    max_running: int  # 0 = no limit
    available_memory: Callable[[], int] = lambda: psutil.virtual_memory().available
    limit_room: Callable[[], int] | None = None  # under a memory limit: what it leaves the jobs now


def machine_capacity(max_running: int, core_oversubscription: float, gpus: int) -> Capacity:
    return Capacity(
        cores=max(1, int((os.cpu_count() or 1) * core_oversubscription)), gpus=gpus, max_running=max_running
    )


class Admission:
    """FIFO admission; `wait(job_id, demand, cancelled)` blocks until the job may start (True)
    or it was cancelled while queued (False). `done(job_id)` when a started job ends."""

    def __init__(self, capacity: Capacity) -> None:
        self.capacity = capacity
        self._cond = threading.Condition()
        self._queue: list[tuple[str, Demand]] = []
        self._running: dict[str, Demand] = {}
        self._why: dict[str, str] = {}

    def _blocker(self, job_id: str, demand: Demand) -> str:
        """Why `job_id` cannot start now ('' when it can). Call with the condition held."""
        ahead = [queued for queued, _ in self._queue[: self._position(job_id)]]
        if ahead:
            return f"queued behind job(s) {', '.join(ahead)}"
        if not self._running:
            return ""  # nothing runs: even a job larger than the machine starts, alone
        cap, used = self.capacity, sum(self._running.values(), Demand(0, 0, 0))
        if cap.max_running and len(self._running) >= cap.max_running:
            return f"{len(self._running)} job(s) running, the daemon's limit is {cap.max_running}"
        if used.cores + demand.cores > cap.cores:
            return f"needs {demand.cores} cores; running jobs hold {used.cores} of {cap.cores}"
        if demand.gpus and used.gpus + demand.gpus > cap.gpus:
            return f"needs {demand.gpus} GPU(s); running jobs hold {used.gpus} of {cap.gpus}"
        if cap.limit_room is not None and used.memory_bytes + demand.memory_bytes > (room := cap.limit_room()):
            return (
                f"needs ~{demand.memory_bytes >> 20} MiB under the daemon's memory limit; running jobs hold "
                f"{used.memory_bytes >> 20} MiB of the {max(0, room) >> 20} MiB it leaves them"
            )
        free = cap.available_memory()
        if demand.memory_bytes > free:
            return f"needs ~{demand.memory_bytes >> 20} MiB of memory; {free >> 20} MiB are available"
        return ""

    def _position(self, job_id: str) -> int:
        """Where `job_id` is in the queue (its length when it is not queued)."""
        return next((i for i, (queued, _) in enumerate(self._queue) if queued == job_id), len(self._queue))

    def wait(
        self, job_id: str, demand: Demand, cancelled: threading.Event, on_wait: Callable[[str], None] = lambda why: None
    ) -> bool:
        with self._cond:
            self._queue.append((job_id, demand))
            try:
                while True:
                    if cancelled.is_set():
                        return False
                    why = self._blocker(job_id, demand)
                    if not why:
                        self._running[job_id] = demand
                        return True
                    if self._why.get(job_id) != why:
                        self._why[job_id] = why
                        on_wait(why)
                    self._cond.wait(timeout=1.0)  # memory frees without a notification: look again
            finally:
                self._queue.pop(self._position(job_id))
                self._why.pop(job_id, None)
                self._cond.notify_all()

    def admit(self, job_id: str, demand: Demand) -> None:
        """Count a job as running now, queue or not: one whose ranks another launcher already started
        (they run whatever the queue says); later jobs wait for what it holds."""
        with self._cond:
            self._running[job_id] = demand
            self._cond.notify_all()

    def done(self, job_id: str) -> None:
        with self._cond:
            self._running.pop(job_id, None)
            self._cond.notify_all()

    def wake(self) -> None:
        """Look again now (a queued job was cancelled)."""
        with self._cond:
            self._cond.notify_all()

    def running(self) -> list[str]:
        with self._cond:
            return list(self._running)
