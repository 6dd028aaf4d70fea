"""What a daemon killed with -9 leaves is removed by a small process it leaves behind: its reaper.

`start_reaper` forks it at start, before the daemon loads torch or starts a thread. It waits on a
pipe whose write end the daemon alone holds (os.pipe's ends are not inherited by what the daemon
execs). A daemon that stops cleanly writes one byte first (`stand_down`): it removed its files
itself, and the reaper exits. A daemon that dies (kill -9, the OOM killer) closes the pipe by
dying. The reaper then waits until the daemon's processes are gone -- every process whose
environment names the daemon's scratch directory as TMPDIR: the forkserver, producers, torchrun
agents and their ranks, which end on their own once their owner is gone (forkserver.py) -- for at
most `PROCESSES_GONE_S`, and takes the runtime directory's lock. A daemon started since holds it,
and cleans up itself: the reaper leaves. Otherwise it kills what of the dead daemon still runs (a
process that ignored its SIGTERM, or one that left its agent's tree and got none) and removes the
scratch directory (multiprocessing's pymp-*, torchrun's files; only one whose mark names the dead
daemon), then the dead daemon's sockets and endpoints and the lock file, and reclaims the
shared-memory segments of owners that are gone, as a clean stop and the next start would. If the
reaper is killed too (a whole process group at once), the next daemon still removes it all at its
start.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import stat
import time
from pathlib import Path

import psutil

from graphtier.contract.runtime_dir import ENDPOINTS_FILE, LOCK_FILE, read_daemon_address
from graphtier.service.daemon.jobs.left_behind import describe, end_processes, marked_processes

log = logging.getLogger("graphtierd")

SCRATCH_MARK = ".graphtierd-scratch"  # in a scratch directory the daemon made, holding its pid
PROCESSES_GONE_S = 30.0  # at most this long for the dead daemon's processes to end before cleaning up
_STAND_DOWN = b"."


def start_reaper(runtime_dir: Path, scratch: Path, sockets: tuple[Path, ...]) -> int:
    """Fork the daemon's reaper; the write end of its pipe, which the daemon keeps until `stand_down`."""
    read_end, write_end = os.pipe()
    daemon = os.getpid()
    if os.fork() == 0:  # the reaper
        code = 0
        try:
            _close_inherited(keep={read_end})  # the runtime and state directories' locks above all
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the daemon, which then stands it down
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if os.read(read_end, 1) != _STAND_DOWN:
                _reap(daemon, runtime_dir, scratch, sockets)
        except BaseException:  # the reaper must end here, never return into the daemon's code
            log.exception("the reaper of graphtierd pid %d failed", daemon)
            code = 1
        finally:
            os._exit(code)
    os.close(read_end)
    return write_end


def _close_inherited(keep: set[int]) -> None:
    """Close every file descriptor the fork inherited but the standard streams, the log file's and `keep`:
    a lock the reaper held on would keep the next daemon from starting."""
    for handler in logging.getLogger().handlers:
        stream = getattr(handler, "stream", None)
        if stream is not None:
            with contextlib.suppress(AttributeError, OSError, ValueError):  # a stream without a file descriptor
                keep.add(stream.fileno())
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def stand_down(write_end: int) -> None:
    """The daemon stopped cleanly: its reaper has nothing to do."""
    with contextlib.suppress(OSError):
        os.write(write_end, _STAND_DOWN)
        os.close(write_end)


def mark_scratch(scratch: Path) -> None:
    """Mark `scratch` as this daemon's (its pid), so that only its own reaper removes it."""
    (scratch / SCRATCH_MARK).write_text(f"{os.getpid()}\n")


def _reap(daemon: int, runtime_dir: Path, scratch: Path, sockets: tuple[Path, ...]) -> None:
    deadline = time.monotonic() + PROCESSES_GONE_S
    while _processes_using(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    lock_path = runtime_dir / LOCK_FILE
    try:
        fd = os.open(lock_path, os.O_RDWR)
    except FileNotFoundError:
        return  # nothing of it is left, or a daemon is being started: that one cleans up
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # a daemon started since: it removed what was stale
        removed, killed = [], []
        with contextlib.suppress(OSError):
            if (scratch / SCRATCH_MARK).read_text().strip() == str(daemon):
                killed = kill_left(scratch)  # under the lock: no daemon started since, so these are the dead one's
                shutil.rmtree(scratch, ignore_errors=True)
                removed.append(str(scratch))
        address = read_daemon_address(runtime_dir)
        if address is not None and address.pid == daemon:
            with contextlib.suppress(FileNotFoundError):
                (runtime_dir / ENDPOINTS_FILE).unlink()
                removed.append(ENDPOINTS_FILE)
        for path in sockets:
            with contextlib.suppress(OSError):
                if stat.S_ISSOCK(path.lstat().st_mode):
                    path.unlink()
                    removed.append(str(path))
        with contextlib.suppress(FileNotFoundError):
            lock_path.unlink()
    finally:
        os.close(fd)  # drops the lock
    from graphtier.service.shm import reclaim_stale_segments  # after: this import takes a while

    segments = reclaim_stale_segments()
    log.warning(
        "graphtierd pid %d ended without stopping (killed?); its reaper removed %s and %d stale segment(s), and "
        "killed %d process(es) that outlived it",
        daemon,
        ", ".join(removed) or "nothing else",
        len(segments),
        len(killed),
    )


def _processes_using(scratch: Path) -> list[psutil.Process]:
    """Processes (but this one) whose environment names `scratch` as TMPDIR: the dead daemon's."""
    return marked_processes({"TMPDIR": str(scratch)})


def kill_left(scratch: Path) -> list[str]:
    """SIGKILL what of a dead daemon still runs (a process that ignored the SIGTERM its owner's end
    brought, or left its agent's tree and got none), and wait for it to go: each one described. Only
    for a dead daemon's `scratch`, under the runtime directory's lock (no daemon started since)."""
    left = _processes_using(scratch)
    named = [describe(process) for process in left]
    end_processes(left, term_grace_s=0)
    for line in named:
        log.warning("killed %s, which outlived its dead graphtierd", line)
    return named
