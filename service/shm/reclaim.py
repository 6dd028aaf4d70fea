"""Reclaiming segments whose owner died without cleaning up (kill -9, OOM killer, power cut of a container).

A segment is stale when the pid in its name no longer runs, runs as a zombie, or belongs to
a process with another start time (the pid was reused). Every new `SegmentOwner` calls
`reclaim_stale_segments`, so a crashed daemon's memory comes back when the next one starts.

Caveat: liveness is judged in this process's pid namespace. Containers that share /dev/shm
(`--ipc=host`) but not their pid namespace would see each other's owners as dead; give such
containers their own /dev/shm (the default) or a shared pid namespace.
"""

from __future__ import annotations

import os

from graphtier.service.shm.naming import PREFIX, SHM_DIR, SegmentName, owner_is_alive


def reclaim_stale_segments() -> list[str]:
    """Unlink every graphtier segment in /dev/shm whose owner process is gone; return their names.

    Segments of live owners, files whose names are not graphtier segment names, and files
    this user may not remove are left alone.
    """
    try:
        entries = [entry.name for entry in os.scandir(SHM_DIR) if entry.name.startswith(PREFIX)]
    except FileNotFoundError:
        return []
    reclaimed: list[str] = []
    for file_name in sorted(entries):
        name = SegmentName.parse(file_name)
        if name is None or owner_is_alive(name):
            continue
        try:
            os.unlink(os.path.join(SHM_DIR, file_name))
        except (FileNotFoundError, PermissionError):
            continue  # another process reclaimed it first, or it is another user's
        reclaimed.append(file_name)
    return reclaimed
