"""What every fault-corpus case is judged by: refused (or handled, for a case whose right answer is not a
refusal) naming the thing, no traceback, no hang, no data lost, no leaks.

A case returns an `Outcome` (what the user saw); `judge` adds what the machine shows after it:
the good dataset still verifies, no shared-memory segment and no process of this run's
namespace appeared that outlives the case (the corpus daemon and its own children aside),
and no half-written dataset directory is left in the dataset root.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

NAMESPACE_VAR = "GRAPHTIER_SHM_NAMESPACE"
VERDICTS: dict[str, Verdict] = {}  # case id -> verdict, for the summary at the end of the run
COVERED_OUTCOMES: dict[str, str] = {}  # node id -> passed / failed / skipped, for the Covered rows


@dataclass
class Outcome:
    """What a case showed: its exit status or replies, the text a user (or the daemon's log) saw."""

    refused: bool  # a non-zero exit, an error status, an HTTP 4xx: the input was not taken as good
    output: str  # stdout + stderr, or the replies' details
    exit_code: int | None = None  # for a process: 2 is the bad-input status
    log: str = ""  # what the daemon logged during the case
    facts: list[str] = field(default_factory=list)  # anything else a check found wrong (state, timing)
    hung: bool = False  # something the case ran was still running at its deadline (and was killed)


@dataclass
class Verdict:
    """One row's result, as the summary counts it."""

    case: str
    silent_success: bool = False
    unnamed: bool = False  # refused, but the message does not name the file/value
    traceback: bool = False
    hang: bool = False  # a command or the case itself outlived the case's deadline
    data_lost: bool = False
    leaks: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (
            self.silent_success
            or self.unnamed
            or self.traceback
            or self.hang
            or self.data_lost
            or self.leaks
            or self.problems
        )


def _environ_has(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def run_processes(exclude_trees: tuple[int, ...] = ()) -> set[int]:
    """Live processes carrying this run's shm namespace, less this one and the trees under `exclude_trees`."""
    marker = f"{NAMESPACE_VAR}={os.environ[NAMESPACE_VAR]}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        if not _environ_has(pid, marker):
            continue
        ancestor, hops = pid, 0
        while ancestor > 1 and ancestor not in exclude_trees and hops < 64:
            ancestor, hops = _parent(ancestor), hops + 1
        if ancestor not in exclude_trees:
            found.add(pid)
    return found


def run_segments() -> set[str]:
    """This run's graphtier segments in /dev/shm (their owner token starts with the namespace)."""
    from graphtier.service.shm.naming import SegmentName, token_namespace

    namespace = token_namespace()
    names = [n for n in os.listdir("/dev/shm") if n.startswith("graphtier.")]
    parsed = {n: SegmentName.parse(n) for n in names}
    return {n for n, seg in parsed.items() if seg is not None and seg.token.startswith(namespace)}


@dataclass
class Snapshot:
    """The machine before a case, to tell what the case left behind."""

    segments: set[str]
    processes: set[int]
    root_entries: set[str]
    daemon_pids: tuple[int, ...]

    @classmethod
    def take(cls, root: Path, daemon_pids: tuple[int, ...]) -> Snapshot:
        return cls(run_segments(), run_processes(daemon_pids), set(os.listdir(root)), daemon_pids)

    def leaks(self, root: Path, settle_s: float = 5.0) -> list[str]:
        """Segments, processes and dataset-root entries new since the snapshot (processes get `settle_s` to exit)."""
        deadline = time.monotonic() + settle_s
        while True:
            processes = run_processes(self.daemon_pids) - self.processes
            if not processes or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        found = [f"segment {s}" for s in sorted(run_segments() - self.segments)]
        found += [f"process {p} ({_cmdline(p)})" for p in sorted(processes)]
        # A .tmp-* or .trash-* entry in the dataset root is something half-written.
        found += [
            f"dataset root entry {e}" for e in sorted(set(os.listdir(root)) - self.root_entries) if e.startswith(".")
        ]
        return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"


def dataset_verifies(root: Path, name: str) -> str | None:
    """None when dataset `name` under `root` opens and every checksum matches, else why not."""
    from graphtier.service.prepared import PreparedDataset

    try:
        PreparedDataset.open(name, root).verify()
    except Exception as exc:  # any failure is data lost
        return f"{type(exc).__name__}: {exc}"
    return None


def judge(
    case: str,
    outcome: Outcome,
    names: tuple[str, ...],
    *,
    expect_exit: int | None,
    lost: str | None,
    leaks: list[str],
    handled: bool = False,
    overran_s: float = 0.0,
) -> Verdict:
    """The row's verdict from its outcome and the machine's state after it. `handled`: the case's right
    answer is not a refusal (a note, a state shown); `outcome.refused` then says it was given.
    `overran_s`: how long past its deadline the case returned."""
    verdict = Verdict(case)
    verdict.silent_success = not outcome.refused and not handled
    if handled and not outcome.refused:
        verdict.problems.append("not handled as documented")
    said = " ".join((outcome.output or "").split())
    missing = [n for n in names if n not in said]
    verdict.unnamed = outcome.refused and bool(missing)
    if verdict.unnamed:
        verdict.problems.append(f"the {'answer' if handled else 'refusal'} does not name {missing}: {said[:400]!r}")
    verdict.hang = outcome.hung or overran_s > 0
    if overran_s > 0:
        verdict.problems.append(f"the case returned {overran_s:.0f} s after its deadline")
    verdict.traceback = "Traceback (most recent call last)" in outcome.output + outcome.log
    if expect_exit is not None and outcome.exit_code is not None and outcome.exit_code != expect_exit:
        verdict.problems.append(f"exit status {outcome.exit_code}, expected {expect_exit}")
    verdict.data_lost = lost is not None
    if lost:
        verdict.problems.append(f"the good dataset no longer verifies: {lost}")
    verdict.leaks = leaks
    verdict.problems.extend(outcome.facts)
    return verdict
