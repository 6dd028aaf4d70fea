"""Real producer processes with a look-ahead window: the same batches, bit for bit, as without one,
every storage row counted once (read or a window hit), and the reader's costs in the control block."""

from __future__ import annotations

import os

import pytest
import torch

from graphtier.service.pipeline import ChannelReader, spawn_producer
from graphtier.service.storage.buffers import MIN_BUDGET_BYTES, StorageBuffers


def _run(config):
    """Every batch of the channel (node ids, features, labels, traffic) and the final stats."""
    batches = []
    with spawn_producer(config) as producer:
        with ChannelReader(producer.layout, timeout=30) as reader:
            while (batch := reader.next_batch()) is not None:
                with batch:
                    batches.append((batch.node_ids.clone(), batch.x.clone(), batch.y.clone(), batch.traffic))
        assert producer.wait(20) == 0
        return batches, producer.stats()


_WITHOUT_WINDOW: dict[str, tuple] = {}  # the run every case compares with, made once per configuration


def _run_once(config):
    """`_run(config)`, remembered by the configuration (its channel directory aside)."""
    key = config.model_dump_json(exclude={"channel_dir"})
    if key not in _WITHOUT_WINDOW:
        _WITHOUT_WINDOW[key] = _run(config)
    return _WITHOUT_WINDOW[key]


def _direct_supported(path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


def _expected_hits(batches, host_end: int, depth: int) -> int:
    """Storage rows of each batch that one of the `depth` batches before it also gathers."""
    rows = [set(ids[ids >= host_end].tolist()) for ids, *_ in batches]
    return sum(len(r & set().union(*rows[max(0, i - depth) : i])) for i, r in enumerate(rows))


def _budget_for_rows(rows: int, row_bytes: int) -> int:
    """The least storage buffer budget whose window cache holds `rows` rows."""
    budget = MIN_BUDGET_BYTES
    while (StorageBuffers.sized(budget).window_bytes or 0) < rows * row_bytes:
        budget += row_bytes
    return budget


@pytest.mark.parametrize(
    ("storage_reads", "window", "bounded"), [("page-cache", 3, True), ("direct", 2, False), ("mmap", 2, False)]
)
def test_window_batches_are_bit_identical_and_every_storage_row_is_counted_once(
    make_config, store, small_rmat, storage_reads, window, bounded
):
    """`bounded`: the window's cache sized from a budget that holds about 1.5 batches' storage rows:
    the window gets shallower (fewer hits), the batches stay the same."""
    if storage_reads == "direct" and not _direct_supported(store.handle.storage_features.path):
        pytest.skip("the dataset's filesystem does not support O_DIRECT")
    base = make_config(epochs=2, batch_size=64, num_slots=2)
    want, want_stats = _run_once(base)
    row_bytes, host_end = small_rmat.manifest.feature_row_bytes, store.handle.plan.host_end
    most = max(int((ids >= host_end).sum()) for ids, *_ in want)
    budget = _budget_for_rows(3 * most // 2, row_bytes) if bounded else None
    update = {"storage_reads": storage_reads, "window": window, "storage_buffer_bytes": budget}
    got, stats = _run(base.model_copy(update=update))
    assert len(got) == len(want) > 2 * window
    for (ids, feats, labels, traffic), (w_ids, w_feats, w_labels, w_traffic) in zip(got, want, strict=True):
        assert torch.equal(ids, w_ids) and torch.equal(labels, w_labels) and traffic == w_traffic
        assert torch.equal(feats, w_feats)  # bit-identical, not merely close
    assert torch.equal(got[-1][1], small_rmat.features[got[-1][0]])
    assert stats.traffic == want_stats.traffic
    s = stats.storage
    assert (s.mode, s.window) == (storage_reads, window)
    assert s.read_rows + s.window_rows == stats.traffic.storage.rows  # each storage row once
    if bounded:
        assert 0 < s.window_rows < _expected_hits(got, host_end, window)
    else:
        assert s.window_rows == _expected_hits(got, host_end, window) > 0
    assert s.window_bytes == s.window_rows * row_bytes and s.window_cached_rows == 0
    if storage_reads == "mmap":
        assert s.read_bytes == s.read_rows * row_bytes and s.requests == 0
    else:  # whole aligned requests, in flight together
        assert s.read_bytes >= s.read_rows * row_bytes and s.requests > 0
        assert s.io_seconds > 0 and s.queue_depth > 0 and s.bandwidth > 0
    w = want_stats.storage  # no window: everything read, no hits, nothing sampled ahead
    assert (w.mode, w.window, w.window_rows, w.lookahead_batches) == ("mmap", 0, 0, 0)
    assert w.read_rows == want_stats.traffic.storage.rows and w.read_bytes == w.read_rows * row_bytes
