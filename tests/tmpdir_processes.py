"""`processes_using(scratch)`: the processes whose environment names `scratch` as TMPDIR.

A daemon points its forkserver (and what that forks) at its scratch directory through TMPDIR, so
these are the processes that must be gone once the daemon is; shared by the daemon's readiness tests
and the fault corpus.
"""

from __future__ import annotations

from pathlib import Path

from graphtier.contract.processes import processes_with_environment


def processes_using(scratch: Path | str) -> list[int]:
    """Pids whose environment holds TMPDIR=`scratch` (processes that end while being read are skipped)."""
    return processes_with_environment({"TMPDIR": str(scratch)})
