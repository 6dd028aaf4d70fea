"""Segment names that say exactly which process owns them, and whether that process lives.

A segment is the file `/dev/shm/graphtier.<pid>.<start>.<token>.<label>`: `pid` and `start`
(the process start time in clock ticks since boot, field 22 of `/proc/<pid>/stat`) identify
the owning process even after its pid is reused; `token` tells apart several owners in one
process; `label` says what the segment holds. Reading the name is enough to decide whether
a segment is stale, with no registry file that a crash could leave inconsistent.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from graphtier.contract.environment import SHM_NAMESPACE_ENV
from graphtier.contract.errors import SharedMemoryError
from graphtier.contract.processes import process_start_time

SHM_DIR = "/dev/shm"
PREFIX = "graphtier."
_NAMESPACE_RE = re.compile(r"[0-9a-f]{1,16}")
MAX_LABEL_LENGTH = 64
_LABEL_RE = re.compile(r"[A-Za-z0-9_-]+")
_NAME_RE = re.compile(rf"graphtier\.([0-9]+)\.([0-9]+)\.([0-9a-f]+)\.([A-Za-z0-9_-]{{1,{MAX_LABEL_LENGTH}}})")


@dataclass(frozen=True)
class SegmentName:
    """The parts of a segment name; `str(name)` gives the file name under /dev/shm."""

    pid: int
    start_time: int
    token: str
    label: str

    def __str__(self) -> str:
        return f"{PREFIX}{self.pid}.{self.start_time}.{self.token}.{self.label}"

    @classmethod
    def parse(cls, name: str) -> SegmentName | None:
        """Split a /dev/shm file name; None if it is not a graphtier segment name."""
        match = _NAME_RE.fullmatch(name)
        if match is None:
            return None
        pid, start, token, label = match.groups()
        return cls(pid=int(pid), start_time=int(start), token=token, label=label)


def token_namespace() -> str:
    """The hex prefix every owner token of this process tree starts with ($GRAPHTIER_SHM_NAMESPACE,
    inherited by children), so one test run or deployment can tell its segments from another's
    on the same machine; '' when unset. SharedMemoryError when it is not 1-16 hex digits."""
    namespace = os.environ.get(SHM_NAMESPACE_ENV, "")
    if namespace and not _NAMESPACE_RE.fullmatch(namespace):
        raise SharedMemoryError(f"${SHM_NAMESPACE_ENV}={namespace!r} must be 1 to 16 lowercase hex digits")
    return namespace


def validate_label(label: str) -> str:
    """Return `label` if it may end a segment name, else raise SharedMemoryError saying why."""
    if not isinstance(label, str) or not _LABEL_RE.fullmatch(label):
        raise SharedMemoryError(
            f"segment label {label!r} is invalid: use only letters, digits, '_' and '-' (at least one)"
        )
    if len(label) > MAX_LABEL_LENGTH:
        raise SharedMemoryError(
            f"segment label {label!r} is {len(label)} characters long; the limit is {MAX_LABEL_LENGTH}"
        )
    return label


def segment_path(name: str) -> str:
    """The file backing segment `name`."""
    return os.path.join(SHM_DIR, name)


def owner_is_alive(name: SegmentName) -> bool:
    """True when the process that created segment `name` still runs (pid-reuse safe)."""
    return process_start_time(name.pid) == name.start_time
