"""Buffers faulted in by a thread while the caller already writes to them: contents are the caller's alone."""

from __future__ import annotations

import threading

import numpy as np

from graphtier.service.out_of_core.prefault import STEP_BYTES, PrefaultedBuffer


def test_rows_placed_while_pages_are_populated_are_kept_and_the_rest_is_zero():
    rows = (3 * STEP_BYTES) // 512 + 7  # several populate steps and a ragged end
    target = PrefaultedBuffer((rows, 128), np.float32, background=True)
    order = np.random.default_rng(0).permutation(rows)
    placed = order[: rows // 2]
    target.array[placed] = np.arange(placed.size, dtype=np.float32)[:, None]  # while the thread runs
    target.close()
    assert not [t for t in threading.enumerate() if t.name == "graphtier-prefault"]
    np.testing.assert_array_equal(target.array[placed, 0], np.arange(placed.size, dtype=np.float32))
    assert not target.array[order[rows // 2 :]].any()
    assert target.array.flags.writeable and target.array.shape == (rows, 128)


def test_empty_and_foreground_buffers():
    assert PrefaultedBuffer((0, 4), np.int64).array.shape == (0, 4)
    buffer = PrefaultedBuffer((1000, 3), np.int64)
    assert not buffer.array.any()
    buffer.close()  # nothing to join
