"""How a producer's storage-tier buffers share the memory it may give them.

Two buffers hold storage rows in a producer: the reader's staging buffer (rows read with
O_DIRECT before they are copied to their slots, `StorageReader`) and the look-ahead window's
row cache (`LookaheadWindow`, plus its bounded buffer for rows bound for scattered slots).
Under a memory limit the daemon gives each producer a byte budget for them (what the job's
fixed need leaves, see graphtier.service.daemon.jobs.memory_need); `StorageBuffers.sized`
splits it: a share for staging, between `MIN_STAGING_BYTES` and `MAX_STAGING_BYTES`, the rest
for the window's cache. Without a budget (no limit) the staging buffer gets its maximum and the
window holds every row of its batches.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphtier.service.storage.read_plan import MAX_REQUEST
from graphtier.service.storage.window import STAGED_BYTES

MIN_STAGING_BYTES = 2 * MAX_REQUEST  # two whole requests: a batch is read in parts of at most half of it
MAX_STAGING_BYTES = 64 << 20  # a batch's staged rows beyond this are read in parts; more buys nothing
STAGING_SHARE = 0.25  # of a budget, for staging (the window's cache takes the rest)
MIN_BUDGET_BYTES = MIN_STAGING_BYTES + STAGED_BYTES  # the least a producer that reads storage rows holds


@dataclass(frozen=True)
class StorageBuffers:
    """Bytes of the reader's staging buffer, and of the window's row cache (None: unbounded)."""

    staging_bytes: int
    window_bytes: int | None

    @classmethod
    def sized(cls, budget_bytes: int | None) -> StorageBuffers:
        """The split of `budget_bytes` (None: no limit); a budget under `MIN_BUDGET_BYTES` gets the minimum
        staging and no window cache (the window then reads each batch straight in)."""
        if budget_bytes is None:
            return cls(MAX_STAGING_BYTES, None)
        staging = min(MAX_STAGING_BYTES, max(MIN_STAGING_BYTES, int(budget_bytes * STAGING_SHARE)))
        return cls(staging, max(0, budget_bytes - staging - STAGED_BYTES))
