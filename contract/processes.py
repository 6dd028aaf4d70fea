"""Process lifetimes. Whether a process still runs, read from /proc: shared by the data plane (who
owns a shared-memory segment) and the CLI (has a stopped daemon's process ended), which must not
load the data plane (torch) to ask. The priority job work runs at, shared by the daemon (its ranks and
producers) and ranks another launcher started (`graphtier.connect`). And a quick exit for the
processes that load it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn


def process_start_time(pid: int) -> int | None:
    """Start time of a live process (clock ticks since boot), None if it is gone or a zombie.

    A zombie has exited and can no longer clean up, so its segments count as stale too.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may itself contain ') '.
    fields = stat[stat.rindex(")") + 2 :].split()
    state, start_time = fields[0], int(fields[19])
    if state in ("Z", "X", "x"):
        return None
    return start_time


JOB_NICENESS = 5  # job work's niceness above the daemon's: its control plane stays responsive


def run_as_job_work(daemon_niceness: int | None = None) -> None:
    """Run this process (a producer, a rank, or torchrun whose ranks inherit it) as job work:
    `JOB_NICENESS` more nice than the daemon, and SCHED_BATCH, so that when cores are short the
    daemon's control plane runs first and a job process that wakes up never preempts it mid-request.

    `daemon_niceness` None: this process runs at the daemon's priority (the daemon forked it), so
    it adds `JOB_NICENESS` to its own. Given (a rank another launcher started): niceness rises to
    the daemon's plus `JOB_NICENESS`, never falls (an unprivileged process cannot lower it back).
    """
    current = os.getpriority(os.PRIO_PROCESS, 0)
    target = current + JOB_NICENESS if daemon_niceness is None else daemon_niceness + JOB_NICENESS
    if target > current:
        os.nice(target - current)
    with contextlib.suppress(AttributeError, OSError):  # not Linux, or a seccomp profile that forbids it
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))


def runs_below(pid: int, reference_pid: int = 0) -> bool:
    """Whether process `pid` runs at a lower priority (more nice) than `reference_pid` (0: this
    process). False when either is gone: the caller then keeps its own priority."""
    try:
        return os.getpriority(os.PRIO_PROCESS, pid) > os.getpriority(os.PRIO_PROCESS, reference_pid)
    except OSError:
        return False


def exit_without_teardown(code: int) -> NoReturn:
    """End this process as interpreter exit would, less collecting its modules.

    For a process that has released all it owns (a stopped daemon, a rank whose built-in loop has
    ended): with torch, grpc and fastapi loaded, that collection is slow, slower still under load,
    and all of it is waited for by whoever waits for the process. The exit steps that
    matter still run: other threads are joined, the atexit handlers run (multiprocessing's,
    logging's flush, the rank's output streams) and the standard streams are flushed.
    """
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # what interpreter exit runs; os._exit below would skip it
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
