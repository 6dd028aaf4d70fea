"""`processes_using(scratch)`: the processes whose environment names `scratch` as TMPDIR.

A daemon points its forkserver (and what that forks) at its scratch directory through TMPDIR, so
these are the processes that must be gone once the daemon is; shared by the daemon's readiness tests
and the fault corpus.
"""

from __future__ import annotations

import os
from pathlib import Path


def processes_using(scratch: Path | str) -> list[int]:
    """Pids whose environment holds TMPDIR=`scratch` (processes that end while being read are skipped)."""
    marker = f"TMPDIR={scratch}".encode()
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found
