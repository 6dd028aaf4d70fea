"""Process lifetimes. Whether a process still runs, read from /proc: shared by the data plane (who
owns a shared-memory segment) and the CLI (has a stopped daemon's process ended), which must not
load the data plane (torch) to ask. And a quick exit for the processes that load it.
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


def exit_without_teardown(code: int) -> NoReturn:
    """End this process as interpreter exit would, less collecting its modules.

    For a process that has released all it owns (a stopped daemon, a rank whose built-in loop has
    ended): with torch, grpc and fastapi loaded, that collection took 0.3-2 s at idle and several
    seconds under load, all of it waited for by whoever waits for the process. The exit steps that
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
