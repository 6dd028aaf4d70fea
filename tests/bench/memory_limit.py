"""A memory limit for a process tree, for benchmarks: a cgroup made for the run, removed after.

cgroup v2 where the unified hierarchy has the memory controller and is writable (a child of
the cgroup this process is in, `memory.max`), else cgroup v1 (`/sys/fs/cgroup/memory/...`,
`memory.limit_in_bytes`; page cache and shared memory a process faults in are charged to
its cgroup in both). A process joins by writing its pid to `cgroup.procs` before it execs
(`preexec`), so everything it starts is inside too. `unavailable()` says why there is none
(then run the benchmark under `systemd-run --scope -p MemoryMax=...` instead).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/memory")


def _own_v2() -> Path | None:
    if not (V2_ROOT / "cgroup.controllers").exists():
        return None
    if "memory" not in (V2_ROOT / "cgroup.controllers").read_text().split():
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return V2_ROOT / line[3:].lstrip("/")
    return None


def unavailable() -> str | None:
    """Why no memory cgroup can be made here, or None when one can."""
    v2 = _own_v2()
    if v2 is not None:
        return None if os.access(v2, os.W_OK) else f"{v2} is not writable (not root, or delegated elsewhere)"
    if V1_ROOT.is_dir():
        return None if os.access(V1_ROOT, os.W_OK) else f"{V1_ROOT} is not writable (not root?)"
    return "neither a cgroup v2 hierarchy with the memory controller nor cgroup v1's memory controller is mounted"


class MemoryLimit:
    """A fresh cgroup limited to `limit_bytes`; `preexec` moves a child into it; `peak_bytes` reads its peak."""

    def __init__(self, name: str, limit_bytes: int) -> None:
        why = unavailable()
        if why:
            raise RuntimeError(f"no memory cgroup: {why}")
        v2 = _own_v2()
        self.v2 = v2 is not None
        self.path = (v2 if v2 is not None else V1_ROOT) / f"{name}-{os.getpid()}"
        self.path.mkdir()
        self.limit_bytes = limit_bytes
        self._write("memory.max" if self.v2 else "memory.limit_in_bytes", str(limit_bytes))
        if self.v2:
            self._write("memory.swap.max", "0")

    def _write(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def preexec(self) -> None:
        """For subprocess.Popen(preexec_fn=...): the child joins the cgroup before it execs."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    @property
    def how(self) -> str:
        knob = "memory.max" if self.v2 else "memory.limit_in_bytes"
        return f"cgroup {'v2' if self.v2 else 'v1'} {self.path} ({knob} = {self.limit_bytes})"

    def peak_bytes(self) -> int:
        """The most memory the cgroup's processes used at once (page cache and shm included)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        path = self.path / name
        return int(path.read_text()) if path.exists() else 0

    def oom_kills(self) -> int:
        """Processes the kernel killed for going over the limit."""
        path = self.path / ("memory.events" if self.v2 else "memory.oom_control")
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def pids(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def close(self, timeout: float = 30.0) -> None:
        """Remove the cgroup once its processes are gone (they must have been stopped by their owner)."""
        deadline = time.monotonic() + timeout
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.pids():
            raise RuntimeError(f"{self.path} still has processes {self.pids()}; not removed")
        self.path.rmdir()

    def __enter__(self) -> MemoryLimit:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
