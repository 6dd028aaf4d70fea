"""The look-ahead window (GIDS window buffering) over the storage tier's rows.

The producer samples `depth` batches ahead of the one it gathers and *admits* each into the
window as soon as it is sampled: the batch's storage rows that no batch in the window holds
yet are read at once, in the background (one batch's reads at a time, each with the
reader's requests in flight), into slots of a row cache; rows some batch in the window
already holds are *window hits* and are not read again. Every cached row carries the number
of window batches that still need it (GIDS's reuse counter): a batch's `fill` copies its
rows out and drops its references, and a row whose count reaches 0 frees its slot. So the
cache holds at most the distinct storage rows of `depth + 1` batches, and a row recurring
within that distance is read once. The bytes are the reader's, so the gathered batch is
bit-identical to one read without a window.

The cache never holds more than `capacity_rows` (sized by the producer from the memory it may
use). A batch whose new rows do not fit beside those the window's earlier batches hold is
*deferred*: it holds nothing yet, the producer samples no further ahead (`Ticket.deferred`), and
when its turn comes (every earlier batch filled and released) it is admitted then, or, if even
alone it does not fit, its rows are read straight into the batch. So under a small limit the
window gets shallower instead of the producer being killed.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.storage.direct_reader import ReaderStats

STAGED_BYTES = 16 << 20  # rows bound for scattered cache slots are read through a buffer of at most this


def _check_admitted(ticket: Ticket, rows: np.ndarray) -> np.ndarray:
    """Where each of `rows` is among the ticket's; GraphtierError unless every one was admitted with it."""
    pos = np.searchsorted(ticket.rows, rows)
    if rows.size and (pos.max() >= ticket.rows.size or not np.array_equal(ticket.rows[pos], rows)):
        raise GraphtierError("rows asked of the window were not admitted with the batch")
    return pos


class RowReader(Protocol):
    """What the window reads with: `StorageReader` or `MappedReader`."""

    @property
    def mode(self) -> str: ...

    stats: ReaderStats

    def empty_rows(self, count: int) -> torch.Tensor: ...

    def read(self, rows: np.ndarray, out: np.ndarray) -> None: ...


@dataclass
class Ticket:
    """One admitted batch: its distinct storage rows (sorted), their cache slots, and its reads."""

    rows: np.ndarray  # int64, storage-relative, sorted, distinct
    slots: np.ndarray  # int64 cache slot of each row
    hits: int  # rows another window batch had already fetched
    done: Future[None] | None  # the background read of the rows this batch fetched itself
    filled: bool = False
    deferred: bool = False  # admitted without a place in the cache yet (no room): read when it is filled


class LookaheadWindow:
    """A reference-counted cache of storage rows for the batches in the window; see the module docstring."""

    def __init__(
        self, reader: RowReader, *, row_bytes: int, initial_rows: int = 1024, capacity_rows: int | None = None
    ) -> None:
        """`capacity_rows`: the most rows the cache may hold (None: as many as the window's batches have)."""
        if capacity_rows is not None and capacity_rows < 0:
            raise GraphtierError(f"window capacity {capacity_rows} rows: expected >= 0")
        self.reader = reader
        self.row_bytes = row_bytes
        self.capacity_rows = capacity_rows
        initial = initial_rows if capacity_rows is None else min(initial_rows, capacity_rows)
        self._cache = reader.empty_rows(max(1, initial))  # placed for direct reads into consecutive slots
        self._free = np.arange(self._cache.shape[0] - 1, -1, -1, dtype=np.int64)  # a stack: pop from the end
        self._nfree = self._cache.shape[0]
        self._rows = np.empty(0, np.int64)  # cached rows, sorted
        self._slot = np.empty(0, np.int64)  # their slots
        self._refs = np.empty(0, np.int64)  # window batches still needing each
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="graphtier-window")
        self._pending: list[Future[None]] = []

    @property
    def cached_rows(self) -> int:
        return int(self._rows.size)

    def admit(self, rows: np.ndarray) -> Ticket:
        """Enter a batch's storage rows (storage-relative, distinct) and start reading the new ones; a
        deferred ticket when they do not fit the capacity beside what the window holds."""
        rows = np.sort(np.asarray(rows, dtype=np.int64))
        return self._admit(rows) or Ticket(rows=rows, slots=np.empty(0, np.int64), hits=0, done=None, deferred=True)

    def _admit(self, rows: np.ndarray) -> Ticket | None:
        """`admit` for sorted rows; None (nothing changed) when the new rows do not fit the capacity."""
        at = np.searchsorted(self._rows, rows)
        hit = np.zeros(rows.size, dtype=bool)
        inside = at < self._rows.size
        hit[inside] = self._rows[at[inside]] == rows[inside]
        new = rows[~hit]
        held = self._cache.shape[0] - self._nfree
        if self.capacity_rows is not None and held + new.size > self.capacity_rows:
            return None
        slots = np.empty(rows.size, np.int64)
        slots[hit] = self._slot[at[hit]]
        np.add.at(self._refs, at[hit], 1)
        done: Future[None] | None = None
        if new.size:
            if new.size > self._nfree:
                self._grow(held + new.size)
            new_slots = self._free[self._nfree - new.size : self._nfree][::-1].copy()
            self._nfree -= new.size
            slots[~hit] = new_slots
            self._insert(new, new_slots)
            done = self._io.submit(self._read, new, new_slots, self._cache)
            self._pending = [f for f in self._pending if not f.done()] + [done]
        return Ticket(rows=rows, slots=slots, hits=int(hit.sum()), done=done)

    def _read(self, rows: np.ndarray, slots: np.ndarray, cache: torch.Tensor) -> None:
        if slots[-1] - slots[0] == slots.size - 1 and bool((np.diff(slots) == 1).all()):
            # consecutive slots (a fresh or emptied cache hands them out so): read straight into them
            self.reader.read(rows, cache[int(slots[0]) : int(slots[0]) + slots.size].numpy())
            return
        step = max(1, STAGED_BYTES // self.row_bytes)  # scattered slots: through a bounded buffer, part by part
        staged = self.reader.empty_rows(min(rows.size, step))
        for at in range(0, rows.size, step):
            part = staged[: min(step, rows.size - at)]
            self.reader.read(rows[at : at + step], part.numpy())
            cache.index_copy_(0, torch.from_numpy(slots[at : at + step]), part)

    def _insert(self, rows: np.ndarray, slots: np.ndarray) -> None:
        merged = np.concatenate([self._rows, rows])
        order = np.argsort(merged, kind="stable")
        self._rows = merged[order]
        self._slot = np.concatenate([self._slot, slots])[order]
        self._refs = np.concatenate([self._refs, np.ones(rows.size, np.int64)])[order]

    def _grow(self, needed: int) -> None:
        """A larger cache (every read in flight finished first: they write into the old one)."""
        self.wait()
        old = self._cache
        size = max(needed, 2 * old.shape[0])
        if self.capacity_rows is not None:
            size = max(needed, min(size, self.capacity_rows))
        self._cache = self.reader.empty_rows(size)
        self._cache[: old.shape[0]] = old
        free = np.empty(size, np.int64)  # room for every slot: releases push freed slots back
        added = size - old.shape[0]
        free[:added] = np.arange(size - 1, old.shape[0] - 1, -1)
        free[added : added + self._nfree] = self._free[: self._nfree]
        self._free, self._nfree = free, added + self._nfree

    def fill(self, ticket: Ticket, rows: np.ndarray, out: np.ndarray) -> None:
        """Copy `rows` (a subset of the ticket's, any order) into out[i] (`out` viewed as bytes), then
        release the ticket: its rows lose one reference, and rows no window batch needs free their slots."""
        if ticket.filled:
            raise GraphtierError("a window batch was filled twice")
        if ticket.deferred and self._fill_deferred(ticket, rows, out):
            return
        if ticket.done is not None:
            ticket.done.result()  # reads run in order: every earlier batch's rows are in as well
        rows = np.asarray(rows, dtype=np.int64)
        pos = _check_admitted(ticket, rows)
        target = torch.from_numpy(out.reshape(out.shape[0], -1).view(np.uint8))[: rows.size]
        torch.index_select(self._cache, 0, torch.from_numpy(ticket.slots[pos]), out=target)
        self._release(ticket)

    def _fill_deferred(self, ticket: Ticket, rows: np.ndarray, out: np.ndarray) -> bool:
        """A deferred batch at its turn: admitted now (True when its rows are read straight into `out`
        instead, as even alone they do not fit the capacity: then it is filled)."""
        admitted = self._admit(ticket.rows)
        if admitted is not None:
            ticket.slots, ticket.hits, ticket.done, ticket.deferred = (
                admitted.slots,
                admitted.hits,
                admitted.done,
                False,
            )
            return False
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        _check_admitted(ticket, rows)
        self._io.submit(self.reader.read, rows, out).result()  # on the reads' thread: the reader is not shared
        ticket.filled = True
        return True

    def _release(self, ticket: Ticket) -> None:
        ticket.filled = True
        at = np.searchsorted(self._rows, ticket.rows)
        np.subtract.at(self._refs, at, 1)
        gone = self._refs == 0
        if gone.any():
            freed = self._slot[gone]
            self._free[self._nfree : self._nfree + freed.size] = freed
            self._nfree += freed.size
            keep = ~gone
            self._rows, self._slot, self._refs = self._rows[keep], self._slot[keep], self._refs[keep]

    def wait(self) -> None:
        """Until every read started so far has finished (raising the first failure)."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.result()

    def close(self) -> None:
        """Stop reading (reads in flight finish first); the reader is its owner's to close."""
        self._io.shutdown(wait=True, cancel_futures=True)
