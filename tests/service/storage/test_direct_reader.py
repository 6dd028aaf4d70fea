"""The storage reader: coalesced, aligned requests; the same rows as the file holds, direct or cached."""

from __future__ import annotations

from dataclasses import astuple

import numpy as np
import pytest
from storage_files import direct_supported, write_features

from graphtier.contract.errors import GraphtierError
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage import StorageReader, plan_reads
from graphtier.service.storage.dio_alignment import FALLBACK
from graphtier.service.storage.read_plan import plan_run_copies


def test_adjacent_rows_coalesce_and_requests_stay_aligned():
    rows = np.array([0, 1, 2, 3, 100, 101, 5007])
    plan = plan_reads(rows, data_offset=128, row_bytes=512, max_request=8192)
    # rows 0-3 share the first block (bytes 128..2176); 100-101 one block; 5007 straddles two blocks
    assert plan.offsets.tolist() == [0, 49152, 2560000]
    assert plan.lengths.tolist() == [4096, 4096, 8192]
    assert all(o % 4096 == 0 and n % 4096 == 0 for o, n in zip(plan.offsets, plan.lengths, strict=True))
    assert plan.staging.tolist() == [0, 4096, 8192]
    assert plan.row_at.tolist() == [
        128,
        640,
        1152,
        1664,
        4096 + 51328 - 49152,
        4096 + 51840 - 49152,
        8192 + 2563712 - 2560000,
    ]
    long = plan_reads(np.arange(64), data_offset=0, row_bytes=4096, max_request=16384)
    assert long.lengths.tolist() == [16384] * 16 and long.offsets.tolist() == list(range(0, 262144, 16384))


@pytest.mark.parametrize("mode", ["direct", "page-cache"])
def test_reads_the_rows_the_file_holds(tmp_path, mode):
    path, values = write_features(tmp_path, 3000, 40)
    if mode == "direct" and not direct_supported(path):
        pytest.skip(f"{tmp_path} does not support O_DIRECT")
    first = 1000
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path),
        row_bytes=160,
        first_row=first,
        num_rows=values.shape[0],
        mode=mode,
        inflight=4,
        max_request=8192,
    )
    try:
        rows = np.random.default_rng(1).integers(0, values.shape[0] - first, 700)
        rows[:50] = np.arange(50)  # a run of adjacent rows, and the last row of the file
        rows[50] = values.shape[0] - first - 1
        out = np.full((800, 40), np.nan, np.float32)
        reader.read(rows, out)
        assert np.array_equal(out[:700], values[rows + first]) and np.isnan(out[700:]).all()
        stats = reader.stats
        assert stats.rows == 700 and stats.row_bytes == 700 * 160 and stats.batches == 1
        assert stats.requests < np.unique(rows).size  # coalesced
        assert stats.bytes_read >= np.unique(rows).size * 160
        with pytest.raises(GraphtierError, match=r"storage rows must lie in \[0, 2000\)"):
            reader.read(np.array([2000]), out)
    finally:
        reader.close()


def test_a_batch_larger_than_the_staging_cap_is_read_in_parts_into_a_buffer_that_stays_under_it(tmp_path):
    path, values = write_features(tmp_path, 4000, 128)  # 512 B rows
    mode = "direct" if direct_supported(path) else "page-cache"
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path),
        row_bytes=512,
        first_row=0,
        num_rows=values.shape[0],
        mode=mode,
        max_request=8192,
        staging_bytes=16384,
    )
    try:
        rows = np.random.default_rng(2).permutation(values.shape[0])[:1500]  # ~1 MiB staged in one plan
        out = np.empty((rows.size, 128), np.float32)
        reader.read(rows, out)
        assert np.array_equal(out, values[rows])
        assert reader.staging.map is not None and len(reader.staging.map) <= 16384
        assert reader.stats.batches == 1 and reader.stats.row_bytes == rows.size * 512
        if (
            mode == "direct" and reader.block == 512
        ):  # a 512 B row misaligned by the 128 B header: two sectors, not 4 KiB
            assert rows.size * 512 < reader.stats.bytes_read <= 2 * rows.size * 512
    finally:
        reader.close()


def test_unknown_mode_and_missing_file_are_refused(tmp_path):
    with pytest.raises(GraphtierError, match="storage mode 'mmap'"):
        StorageReader(tmp_path / "f.npy", data_offset=128, row_bytes=4, first_row=0, num_rows=1, mode="mmap")
    with pytest.raises(GraphtierError, match="cannot open the storage tier"):
        StorageReader(
            tmp_path / "missing.npy", data_offset=128, row_bytes=4, first_row=0, num_rows=1, mode="page-cache"
        )


@pytest.mark.parametrize("host_end", [0, 1000, 2400, 3000])
@pytest.mark.parametrize("mode", ["direct", "page-cache"])
def test_tiered_gather_through_the_reader_gives_the_same_bytes_and_counts(tmp_path, host_end, mode):
    import dataclasses

    import torch

    from graphtier.service.gather import FeatureTiers, tiered_gather
    from graphtier.service.native_ops import native_available

    path, values = write_features(tmp_path, 3000, 40)
    if mode == "direct" and not direct_supported(path):
        pytest.skip(f"{tmp_path} does not support O_DIRECT")
    table = torch.from_numpy(np.load(path))
    mapped = FeatureTiers.from_table(
        table, replicated_end=min(100, host_end), interleaved_end=min(300, host_end), host_end=host_end, num_devices=2
    )
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path) + host_end * 160,
        row_bytes=160,
        first_row=0,
        num_rows=3000 - host_end,
        mode=mode,
    )
    read = dataclasses.replace(mapped, storage_reader=reader)
    ids = torch.randint(0, 3000, (5000,), generator=torch.Generator().manual_seed(host_end))
    backends = ["torch"] + (["native"] if native_available() else [])
    try:
        for backend in backends:
            want, got = torch.zeros(5000, 40), torch.full((5100, 40), 7.0)
            assert tiered_gather(ids, read, got, backend=backend) == tiered_gather(ids, mapped, want, backend=backend)
            assert torch.equal(got[:5000], want) and bool((got[5000:] == 7).all())
        assert reader.stats.rows == len(backends) * int((ids >= host_end).sum())
    finally:
        reader.close()


@pytest.mark.parametrize("mode", ["direct", "page-cache"])
def test_whole_runs_copied_while_reading_give_the_same_bytes(tmp_path, mode):
    """Long runs of adjacent rows bound for consecutive slots are copied by the reading threads;
    the same batch with the runs reversed (so every row goes through the final gather) reads the same."""
    path, values = write_features(tmp_path, 6000, 40)
    if mode == "direct" and not direct_supported(path):
        pytest.skip(f"{tmp_path} does not support O_DIRECT")
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path),
        row_bytes=160,
        first_row=0,
        num_rows=6000,
        mode=mode,
        inflight=4,
        max_request=8192,
        alignment=FALLBACK,
    )
    try:
        scattered = np.random.default_rng(2).choice(np.arange(3000, 6000), 300, replace=False)
        rows = np.concatenate([np.arange(7, 1207), scattered, np.arange(1500, 2400)])  # 192 KiB and 144 KiB runs
        unique, inverse = np.unique(rows, return_inverse=True)
        plan = plan_reads(unique, data_offset=npy_data_offset(path), row_bytes=160, max_request=8192)
        row_slot = np.empty(unique.size, np.int64)
        row_slot[inverse] = np.arange(rows.size)
        first, count, slot, copied = astuple(plan_run_copies(plan, unique, row_slot, 160))
        in_runs = np.isin(unique, np.concatenate([np.arange(7, 1207), np.arange(1500, 2400)]))
        assert not copied[~in_runs].any()  # the scattered rows: gathered at the end
        assert copied[in_runs].mean() > 0.9  # the runs' rows, but for those straddling two 8 KiB requests
        assert count.sum() == copied.sum() and set(slot[count > 0]) >= {0, 1500}
        for batch in (rows, rows[::-1].copy(), np.concatenate([rows, rows[:10]]), np.sort(rows)):
            out = np.full((batch.size + 3, 40), np.nan, np.float32)
            reader.read(batch, out)
            assert np.array_equal(out[: batch.size], values[batch]) and np.isnan(out[batch.size :]).all()
        assert not plan_run_copies(plan, unique, row_slot[::-1].copy(), 160).copied.any()  # reversed: nothing in order
    finally:
        reader.close()
