"""Processes a job or a dead daemon left running: found by a mark in their environment, and ended.

A process keeps the environment it was exec'd with through every fork, and keeps it when it leaves
its parent's tree (a double fork reparents it to init, `setsid` takes it out of its group and
session): the mark finds it where a walk of the tree or a signal to a group does not. The job runner
looks for a job's id and token once torchrun is gone; the reaper and the next daemon look for a dead
daemon's scratch directory as TMPDIR. A process exec'd with an environment that lacks the mark
(`env -i`, `Popen(env={...})`) is not found.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping

import psutil

GONE_POLL_S = 0.05
KILLED_GONE_S = 3.0  # at most this long for a killed process to give back its memory


def marked_processes(marks: Mapping[str, str]) -> list[psutil.Process]:
    """The processes (but this one) whose environment holds every `NAME=VALUE` of `marks`.

    Each is bound to its identity (pid and start time) before its environment is read, and psutil
    signals a process only while it is still that one: a pid reused since is left alone. Processes
    that end while being read, or that this user may not read, are skipped.
    """
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            environment = process.environ()
            if all(environment.get(name) == value for name, value in marks.items()):
                found.append(process)
    return found


def still_running(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of `processes` still running after up to `timeout_s`. One that exited and that nobody reaped
    yet (a zombie: its parent, init by now, collects it when it gets to it) has ended."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for process in processes:
            with contextlib.suppress(psutil.Error):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(GONE_POLL_S)


def end_processes(processes: list[psutil.Process], term_grace_s: float) -> list[psutil.Process]:
    """Continue and SIGTERM each of `processes`, SIGKILL those still running after `term_grace_s` (0: at
    once, no SIGTERM), and wait for those to go; the ones that had to be killed. A stopped process acts
    on a SIGTERM only once continued."""
    if term_grace_s > 0:
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.resume()
                process.terminate()
    killed = still_running(processes, term_grace_s)
    for process in killed:
        with contextlib.suppress(psutil.Error):
            process.kill()
    still_running(killed, KILLED_GONE_S)  # a big process takes a moment to give back its memory
    return killed


def describe(process: psutil.Process) -> str:
    """`pid N: COMMAND LINE` (its first 120 characters), read before it is signalled."""
    try:
        command = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        command = "?"
    return f"pid {process.pid}: {command[:120]}"
