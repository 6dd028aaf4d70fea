"""Why a rank failed, in one line, handed from the rank to the daemon through the job's directory.

A rank that dies of an exception (the user's script or the runtime's) writes the exception's
last traceback line -- `ValueError: bad learning rate` -- to `<job_dir>/failures/` before it
exits (the rank's side, `write_rank_failure`). When torchrun then fails the job, the daemon
names that line as the job's cause, instead of torchrun's exit status alone. One file per rank
and torchrun attempt; the first written of the last attempt is the cause (ranks that fail after
it fail because of it); the daemon's side is `first_rank_failure`.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from graphtier.contract.jobs.directory import rank_failure_dir

MAX_LINE = 1000


def failure_line(exc: BaseException) -> str:
    """The last line of `exc`'s traceback (`Type: message`), on one line, at most MAX_LINE characters."""
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    line = " ".join(last.split())
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def write_rank_failure(job_dir: Path, rank: int, exc: BaseException) -> Path:
    """Record why `rank` fails; returns the file (never raises: the rank is dying anyway). The first record
    of a rank and attempt stands: a script's job writes it as the exception leaves the script's `with`
    block, before the rank leaves the process group (whose peers then fail too, of a lost connection),
    and the rank's entry point, which sees the same exception later, does not rewrite it (its time is
    what orders the ranks' failures)."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    path = rank_failure_dir(job_dir) / f"attempt{attempt:03d}-rank{rank}.txt"
    if path.exists():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(failure_line(exc) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass
    return path


def first_rank_failure(job_dir: Path) -> str | None:
    """`rank N: <line>` of the earliest failure of the last attempt, or None when no rank wrote one."""
    found = sorted(rank_failure_dir(job_dir).glob("attempt*-rank*.txt"))
    if not found:
        return None
    last_attempt = found[-1].name.split("-")[0]
    candidates = []
    for path in found:
        if path.name.startswith(last_attempt + "-"):
            try:
                candidates.append((path.stat().st_mtime_ns, path, path.read_text().strip()))
            except OSError:
                continue
    if not candidates:
        return None
    _, path, line = min(candidates)
    rank = path.stem.split("-rank")[-1]
    return f"rank {rank}: {line}"
