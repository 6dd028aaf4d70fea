"""Processes forked from one warm server instead of started as fresh interpreters.

A fresh interpreter that imports torch holds about 150 MiB of private memory before it does
any work (relocated library pages, the interpreter's heap); with a producer per rank and a
torchrun agent per job that is paid again and again beside the one copy of the data. A child
forked from a process that has already imported those modules shares the pages
copy-on-write and costs a few MiB. multiprocessing's forkserver is that process: started
once per parent (the daemon, or a test) with `PRELOAD` imported, it forks each child on
request and reports its exit status back. `ForkedProcess` gives the parent the supervision
surface of `subprocess.Popen` (pid, poll, wait, terminate, kill) over such a child, and the
child terminates itself when its owner dies (kill -9 of the daemon leaves nothing running).

The server is started with `OMP_WAIT_POLICY=PASSIVE`: OpenMP reads it once, when torch is
loaded, and producers share cores with trainer ranks, where busy-waiting OpenMP threads
steal the cores the ranks compute on.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from graphtier.service.shm.naming import process_start_time

PRELOAD = ["graphtier.service.pipeline.producer", "torch.distributed.run"]
SERVER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

_lock = threading.Lock()


def forkserver_context() -> ForkServerContext:
    """The forkserver context children are started from; starts the server on first use."""
    context = multiprocessing.get_context("forkserver")
    with _lock:
        saved = {key: os.environ.get(key) for key in SERVER_ENV}
        os.environ.update(SERVER_ENV)  # inherited by the server alone: it is started right here
        try:
            context.set_forkserver_preload(PRELOAD)
            multiprocessing.forkserver.ensure_running()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return context


def stop_forkserver() -> None:
    """Stop this process's forkserver, then multiprocessing's resource tracker (the server held it open),
    and wait for each to exit. Their children are not waited for: the caller has ended them (the daemon
    stops its jobs first)."""
    import multiprocessing.resource_tracker

    for module, name in (
        (multiprocessing.forkserver, "_forkserver"),
        (multiprocessing.resource_tracker, "_resource_tracker"),
    ):
        stop = getattr(getattr(module, name, None), "_stop", None)  # CPython's own (3.8 and later)
        if stop is not None:
            with _lock, contextlib.suppress(OSError, ChildProcessError):
                stop()


def _die_with_the_owner(owner: tuple[int, int | None], target: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """In the child: SIGTERM itself when the process that asked for it (the daemon) exits, also by SIGKILL.

    The child's parent is the forkserver, which outlives a killed daemon (every child holds the
    server's keep-alive pipe), so the parent-death signal would never fire: the child watches its
    owner through a pidfd instead. On SIGTERM producers unlink their slots and torchrun stops its ranks.
    """
    owner_pid, owner_start = owner
    try:
        pidfd: int | None = os.pidfd_open(owner_pid)
    except ProcessLookupError:  # the owner died before the child started
        raise SystemExit(0) from None
    except (AttributeError, OSError):  # no pidfds (Linux < 5.3): poll the pid and its start time instead
        pidfd = None

    def watch() -> None:
        if pidfd is not None:
            select.select([pidfd], [], [])  # readable once the owner has exited
        else:
            while process_start_time(owner_pid) == owner_start:
                time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="graphtier-owner-watch", daemon=True).start()
    target(*args)


def redirect_output(log_path: str | Path) -> None:
    """In a forked child: send stdout and stderr (file descriptors 1 and 2) to the end of `log_path`."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log_fd, sys.stdout.fileno())
    os.dup2(log_fd, sys.stderr.fileno())
    os.close(log_fd)


def _this_process() -> tuple[int, int | None]:
    return os.getpid(), process_start_time(os.getpid())


class ForkedProcess:
    """A child of the forkserver, supervised like a `subprocess.Popen`.

    `target(*args)` runs in the child; its `SystemExit` code is the exit status, an uncaught
    exception exits 1 after printing its traceback, a signal gives minus its number.
    """

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...], *, name: str) -> None:
        self.process: BaseProcess = forkserver_context().Process(
            target=_die_with_the_owner, args=(_this_process(), target, args), name=name, daemon=True
        )
        self.process.start()
        self.pid: int = self.process.pid or 0

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable when the child exits."""
        return self.process.sentinel

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        code = self.process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return code

    def terminate(self) -> None:
        self.process.terminate()

    def kill(self) -> None:
        self.process.kill()

    def stop(self, timeout: float) -> int:
        """SIGTERM (and SIGCONT, so a stopped child runs its cleanup), then SIGKILL after `timeout` seconds."""
        if self.poll() is None:
            self.terminate()
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)
            try:
                return self.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.wait()
