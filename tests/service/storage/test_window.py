"""The look-ahead window: the file's rows, each distinct row read once while a window batch needs it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage import LookaheadWindow, MappedReader, StorageCounters, StorageReader


def _features(tmp_path, rows=4000, dim=24):
    values = np.random.default_rng(0).standard_normal((rows, dim)).astype(np.float32)
    path = tmp_path / "features.npy"
    np.save(path, values)
    return path, values


def _batches(num_rows, count=30, size=300, seed=3):
    gen = np.random.default_rng(seed)
    hot = np.arange(60)  # rows that recur in most batches, as the hottest storage rows do
    return [
        np.unique(np.concatenate([gen.choice(num_rows, size, replace=False), gen.choice(hot, 40)]))
        for _ in range(count)
    ]


def _expected_hits(batches, depth):
    """Rows of batch i that one of batches i-depth .. i-1 also has (those are in the window when i enters)."""
    return [
        len(set(b.tolist()) & set().union(*(set(p.tolist()) for p in batches[max(0, i - depth) : i])))
        for i, b in enumerate(batches)
    ]


@pytest.mark.parametrize("mode", ["mmap", "page-cache"])
@pytest.mark.parametrize("depth", [1, 4])
def test_window_serves_the_files_rows_and_reads_each_recurring_row_once(tmp_path, mode, depth):
    path, values = _features(tmp_path)
    first = 1000  # storage rows start here, as past a host tier
    if mode == "mmap":
        reader = MappedReader(torch.from_numpy(np.load(path, mmap_mode="r")[first:].copy()))
    else:
        reader = StorageReader(
            path,
            data_offset=npy_data_offset(path),
            row_bytes=96,
            first_row=first,
            num_rows=values.shape[0],
            mode="page-cache",
            inflight=4,
        )
    batches = _batches(values.shape[0] - first)
    window = LookaheadWindow(reader, row_bytes=96, initial_rows=16)  # small: it must grow
    try:
        tickets = [window.admit(b) for b in batches[: depth + 1]]
        hits = []
        for i, rows in enumerate(batches):
            ticket = tickets[i]
            order = np.random.default_rng(i).permutation(rows)  # the batch's own order, not sorted
            out = np.full((order.size + 5, 24), np.nan, np.float32)
            window.fill(ticket, order, out)
            assert np.array_equal(out[: order.size], values[order + first]) and np.isnan(out[order.size :]).all()
            hits.append(ticket.hits)
            if i + depth + 1 < len(batches):
                tickets.append(window.admit(batches[i + depth + 1]))
            assert window.cached_rows <= sum(b.size for b in batches[i + 1 : i + depth + 2])
        assert window.cached_rows == 0
        assert hits == _expected_hits(batches, depth) and sum(hits) > 0
        distinct_reads = sum(b.size for b in batches) - sum(hits)
        assert reader.stats.rows == distinct_reads  # nothing read twice inside the window
        with pytest.raises(GraphtierError, match="filled twice"):
            window.fill(tickets[0], batches[0], np.empty((batches[0].size, 24), np.float32))
    finally:
        window.close()
        if isinstance(reader, StorageReader):
            reader.close()


def test_rows_not_admitted_are_refused(tmp_path):
    path, values = _features(tmp_path)
    window = LookaheadWindow(MappedReader(torch.from_numpy(values)), row_bytes=96)
    try:
        ticket = window.admit(np.array([3, 9]))
        with pytest.raises(GraphtierError, match="not admitted"):
            window.fill(ticket, np.array([3, 4]), np.empty((2, 24), np.float32))
    finally:
        window.close()


def test_counters_sum_and_derive():
    a = StorageCounters(
        mode="direct",
        window=2,
        read_rows=10,
        read_bytes=40960,
        requests=10,
        window_rows=30,
        io_seconds=0.5,
        request_seconds=2.0,
    )
    b = StorageCounters(
        mode="direct",
        window=4,
        read_rows=30,
        read_bytes=40960,
        requests=5,
        window_rows=10,
        io_seconds=0.5,
        request_seconds=1.0,
    )
    total = a + b
    assert (total.rows, total.window, total.requests) == (80, 4, 15)
    assert total.window_hit_ratio == 0.5 and total.queue_depth == 3.0 and total.bandwidth == 81920
    assert (a + StorageCounters()).mode == "mixed" and StorageCounters().queue_depth == 0.0
    assert sum([a, b], StorageCounters(mode="direct")) == total


@pytest.mark.parametrize("capacity", [700, 100])
def test_a_window_never_holds_more_than_its_capacity_and_defers_what_does_not_fit(tmp_path, capacity):
    """As the producer's look-ahead drives it: admit up to 4 ahead but none past a deferred batch."""
    path, values = _features(tmp_path)
    reader = MappedReader(torch.from_numpy(values))
    batches = _batches(values.shape[0], count=12)  # ~340 rows each: 2 fit in 700 rows, none in 100
    window = LookaheadWindow(reader, row_bytes=96, initial_rows=16, capacity_rows=capacity)
    try:
        tickets, deferred = [], 0
        for i, rows in enumerate(batches):
            while len(tickets) < min(i + 5, len(batches)) and not (len(tickets) > i and tickets[-1].deferred):
                tickets.append(window.admit(batches[len(tickets)]))
            deferred += tickets[i].deferred
            out = np.empty((rows.size, 24), np.float32)
            window.fill(tickets[i], rows[::-1], out)
            assert np.array_equal(out, values[rows[::-1]])
            assert window.cached_rows <= capacity and window._cache.shape[0] <= max(capacity, 1)
        assert deferred > 0 and window.cached_rows == 0
        assert (sum(t.hits for t in tickets) > 0) == (capacity == 700)  # room for two batches: recurring rows hit
    finally:
        window.close()
