"""The tiering report's storage outlook: exact storage reads of the replay, and the window's hits."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphtier.contract.errors import PlacementError
from graphtier.service.tiering import build_tiering_report, replay_access_counts
from graphtier.service.tiering.storage_outlook import WindowReplay, window_depths


def test_window_replay_counts_rows_recurring_within_the_depth():
    batches = [torch.tensor(b) for b in ([0, 5, 6, 7], [6, 8, 9], [1, 5, 9], [5, 7, 8], [2, 6])]
    replay = WindowReplay(num_nodes=10, storage_from=5, depths=[0, 1, 2, 8], row_bytes=4)
    for ids in batches:
        replay.observe(ids)
    rows = [set(b.tolist()) - {0, 1, 2, 3, 4} for b in batches]
    for depth in (0, 1, 2, 8):  # brute force: rows of batch i that one of the `depth` batches before it has
        hits = sum(len(r & set().union(*rows[max(0, i - depth) : i])) for i, r in enumerate(rows))
        assert replay.read_rows[depth] == sum(map(len, rows)) - hits
        assert replay.read_bytes[depth] == replay.read_rows[depth] * 4
    assert replay.read_rows[0] == replay.rows == 12 and replay.read_rows[8] == 5
    assert window_depths(8) == [0, 1, 2, 4, 8] and window_depths(0) == [0] and window_depths(3) == [0, 1, 2, 3]


def test_report_gives_the_storage_reads_of_its_replay_and_the_windows_effect(small_rmat):
    n, row_bytes = small_rmat.manifest.num_nodes, small_rmat.manifest.feature_row_bytes
    kwargs = dict(budget="10%", fanouts=(5, 3), batch_size=64, epochs=2, seed=4)
    report = build_tiering_report(small_rmat, host_budget="30%", window=4, **kwargs)
    s = report.storage
    assert s is not None and s.storage_from == report.budget_rows + int(n * row_bytes * 0.3) // row_bytes
    assert (s.storage_rows, s.storage_bytes) == (n - s.storage_from, (n - s.storage_from) * row_bytes)
    replay = replay_access_counts(
        small_rmat.graph, small_rmat.split("train"), fanouts=(5, 3), batch_size=64, epochs=2, seed=4
    )
    storage_reads = int(replay.counts[s.storage_from :].sum())  # the same simulated access, counted apart
    assert s.rows_per_epoch * 2 == storage_reads and s.rows_per_batch * report.batches == pytest.approx(storage_reads)
    assert s.share_of_reads == pytest.approx(storage_reads / replay.total)
    assert [w.depth for w in s.windows] == [0, 1, 2, 4]
    none, *deeper = s.windows
    assert none.hit_ratio == 0 and none.read_rows_per_batch == s.rows_per_batch
    assert none.read_bytes_per_batch >= s.row_bytes_per_batch  # whole 4 KiB requests
    ratios = [w.hit_ratio for w in s.windows]
    assert ratios == sorted(ratios) and ratios[-1] > 0
    assert all(w.read_bytes_per_epoch <= none.read_bytes_per_epoch for w in deeper)
    assert build_tiering_report(small_rmat, **kwargs).storage is None


@pytest.mark.parametrize(
    ("host_budget", "window", "message"),
    [
        ("95%", 4, "--host-budget 95% is"),
        ("lots", 4, "--host-budget"),
        ("10%", 65, "--window 65: expected 0 to 64"),
    ],
)
def test_bad_host_budget_or_window_is_named(small_rmat, host_budget, window, message):
    with pytest.raises(PlacementError, match=message):
        build_tiering_report(small_rmat, budget="10%", host_budget=host_budget, window=window, epochs=1)


def test_rows_without_a_feature_file_count_their_own_bytes():
    replay = WindowReplay(num_nodes=4, storage_from=0, depths=[0], row_bytes=100)
    replay.observe(torch.tensor([3, 1]))
    assert replay.read_bytes[0] == 200 and np.array_equal(replay._last, [-1, 0, -1, 0])
