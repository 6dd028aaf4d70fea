"""Whether a process still runs, read from /proc: shared by the data plane (who owns a shared-memory
segment) and the CLI (has a stopped daemon's process ended), which must not load the data plane
(torch) to ask."""

from __future__ import annotations


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
