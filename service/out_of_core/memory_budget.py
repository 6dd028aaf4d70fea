"""The memory budget of `dataset prepare`: what a user typed, and the chunk sizes it allows.

The budget caps the preparing process's resident memory (its peak RSS), which holds three
things: what the process already held when preparation started (interpreter, torch), the
per-node arrays every step keeps (colptr, degrees, scores, the permutation both ways,
labels, splits: at most `NODE_BYTES` per node), and the working memory of the step that
runs. The out-of-core path sizes each chunk and each on-disk bucket from that working
memory, so a bigger graph under the same budget means more chunks, not more memory.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from graphtier.contract.errors import GraphtierError, PlacementError
from graphtier.service.placement.tier_budget import parse_budget

OPTION = "--memory-budget"
UNLIMITED = ("unlimited", "none", "off")
DEFAULT_SHARE = 0.5  # of the machine's memory
NODE_BYTES = 112  # per-node arrays alive at once, at most (14 int64/float64 values per node)
NODE_TRANSIENT_BYTES = 64  # per-node arrays a step may allocate after it measured what is held
MIN_WORK_BYTES = 16 << 20  # below this no step makes useful progress
SAFETY_SHARE = 0.08  # of the budget, kept free for allocator slack and small temporaries


class MemoryBudgetError(GraphtierError):
    """A memory budget that is not a size, or too small to prepare this graph in."""


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def machine_memory_bytes() -> int:
    """Physical memory, or the cgroup's memory limit when that is lower."""
    total = psutil.virtual_memory().total
    limit = Path("/sys/fs/cgroup/memory.max")
    try:
        text = limit.read_text().strip()
    except OSError:
        return total
    return min(total, int(text)) if text.isdigit() else total


def parse_memory_budget(text: str | int | None) -> int | None:
    """Bytes meant by `text` (`3GiB`, `512MiB`, `40%` of memory, a byte count); None = unlimited.

    `None` or `auto` is the default: half of the machine's memory. `unlimited` selects the
    in-memory path, which has no bound. Anything else raises `MemoryBudgetError` naming it.
    """
    if text is None or (isinstance(text, str) and text.strip().lower() == "auto"):
        return int(machine_memory_bytes() * DEFAULT_SHARE)
    if isinstance(text, str) and text.strip().lower() in UNLIMITED:
        return None
    try:
        value = parse_budget(text, total_bytes=machine_memory_bytes(), what=OPTION)
    except PlacementError as exc:
        raise MemoryBudgetError(f"{exc}; 'unlimited' selects the unbounded in-memory path") from None
    if value <= 0:
        raise MemoryBudgetError(f"{OPTION} {text!r} must be more than 0 bytes")
    return value


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def limit_allocator_retention(work_bytes: int) -> bool:
    """Bound what glibc keeps of freed memory, in proportion to the working memory.

    By default glibc raises its mmap threshold (up to 32 MiB) and trim threshold (twice that)
    as large blocks are freed, so when that happens depends on the order of allocations, and the
    peak RSS under a small budget varied from run to run by a large share of the budget.
    Fixing both at work/32 and twice that (within [128 KiB, 32 MiB]) makes the slack bounded
    and repeatable, while chunk-sized temporaries are still reused from the heap (a fixed
    threshold of 128 KiB maps and faults in every chunk afresh, a large share of the time).
    Process-wide; a no-op off glibc.
    """
    libc = _libc()
    threshold = int(min(32 << 20, max(128 << 10, work_bytes // 32)))
    try:
        return bool(
            libc and libc.mallopt(M_MMAP_THRESHOLD, threshold) and libc.mallopt(M_TRIM_THRESHOLD, 2 * threshold)
        )
    except AttributeError:
        return False


def release_free_memory() -> None:
    """Give the heap's free memory back to the system (glibc `malloc_trim`), before measuring RSS."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):  # glibc only
        libc.malloc_trim(0)


def current_rss_bytes() -> int:
    """Resident memory of this process now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class MemoryPlan:
    """Working memory left under a budget, and the chunk sizes that fit in it.

    Each step calls `refresh` first: the working memory is then the budget less what the
    process holds at that moment (measured, so whatever earlier steps kept counts), less
    the per-node arrays a step may still allocate and a safety share. `work_bytes` given
    explicitly (tests, to force many chunks on a small graph) is used as is throughout.
    """

    budget_bytes: int
    held_at_start: int
    work_bytes: int
    explicit: bool = False
    num_nodes: int = 0
    lowest_work: int = 0

    @classmethod
    def start(cls, budget_bytes: int, *, work_bytes: int | None = None) -> MemoryPlan:
        held = current_rss_bytes()
        if work_bytes is not None:
            limit_allocator_retention(int(work_bytes))
            return cls(budget_bytes, held, int(work_bytes), explicit=True, lowest_work=int(work_bytes))
        work = budget_bytes - held - int(budget_bytes * SAFETY_SHARE)
        limit_allocator_retention(work)
        if work < MIN_WORK_BYTES:
            raise MemoryBudgetError(
                f"{OPTION} {_gib(budget_bytes)} is too small to make progress: this process already holds "
                f"{_gib(held)} before preparing anything; "
                f"give at least {_gib((held + MIN_WORK_BYTES) / (1 - SAFETY_SHARE))}"
            )
        return cls(budget_bytes, held, work, lowest_work=work)

    def reserve_nodes(self, num_nodes: int) -> None:
        """Learn the node count (once, before anything O(E) is held); refuse a budget its arrays cannot fit."""
        self.num_nodes = num_nodes
        if self.explicit:
            return
        need = num_nodes * NODE_BYTES
        if self.work_bytes - need < MIN_WORK_BYTES:
            least = (self.held_at_start + need + MIN_WORK_BYTES) / (1 - SAFETY_SHARE)
            raise MemoryBudgetError(
                f"{OPTION} {_gib(self.budget_bytes)} is too small to make progress on {num_nodes:,} nodes: "
                f"the process holds {_gib(self.held_at_start)} and the per-node arrays need {_gib(need)}; "
                f"give at least {_gib(least)}"
            )
        self.refresh()

    def refresh(self, *, transient_per_node: int = NODE_TRANSIENT_BYTES) -> int:
        """Measure again what the working memory is now (see the class docstring); a step that
        allocates fewer per-node arrays than `NODE_TRANSIENT_BYTES` per node says so."""
        if not self.explicit:
            release_free_memory()
            free = self.budget_bytes - current_rss_bytes() - int(self.budget_bytes * SAFETY_SHARE)
            self.work_bytes = max(MIN_WORK_BYTES, free - self.num_nodes * transient_per_node)
            self.lowest_work = min(self.lowest_work, self.work_bytes)
        return self.work_bytes

    def fits(self, nbytes: int, *, share: float = 1.0) -> bool:
        """Whether `nbytes` may be held in memory, within `share` of the working memory."""
        return nbytes <= self.work_bytes * share

    def units(self, bytes_per_unit: float, *, share: float = 1.0, cap: int | None = None, multiple: int = 1) -> int:
        """How many units of `bytes_per_unit` fit in `share` of the working memory (at least `multiple`)."""
        count = int(self.work_bytes * share / bytes_per_unit)
        if cap is not None:
            count = min(count, cap)
        return max(multiple, count // multiple * multiple)

    def describe(self) -> dict[str, object]:
        return {
            "budget_bytes": self.budget_bytes,
            "held_at_start_bytes": self.held_at_start,
            "lowest_work_bytes": self.lowest_work,
            "work_explicit": self.explicit,
        }
