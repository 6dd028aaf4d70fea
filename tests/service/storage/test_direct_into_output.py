"""Runs of adjacent rows read straight into the caller's rows: the plan, the alignment, and the bytes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from storage_files import direct_supported, write_features

from graphtier.contract.errors import GraphtierError
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage import StorageReader
from graphtier.service.storage.dio_alignment import FALLBACK, DirectIOAlignment, direct_io_alignment
from graphtier.service.storage.read_plan import plan_direct_reads

SECTOR = DirectIOAlignment(memory=512, offset=512, reported=True)


def test_a_run_is_read_from_its_first_aligned_byte_to_its_last_and_covers_the_rows_inside():
    rows = np.concatenate([np.arange(10, 510), [600], np.arange(700, 1100)])  # 160 B rows from byte 64
    slots = np.arange(rows.size)  # run 1 to output rows 0..499, row 600 to 500, run 2 to 501..900
    file_lo, file_hi = 64 + rows * 160, 64 + (rows + 1) * 160

    def plan(out_address: int, **kwargs):
        return plan_direct_reads(
            rows,
            slots,
            out_address=out_address,
            data_offset=64,
            row_bytes=160,
            alignment=SECTOR,
            **{"max_request": 32768, "min_bytes": 4096, **kwargs},
        )

    # run 1: file bytes [1664, 81664), congruent modulo 512 with its output at 28800 + 0: read [2048, 81408)
    one = plan(4096 * 7 + 128)
    assert one.offsets.tolist() == [2048, 2048 + 32768, 2048 + 65536]
    assert one.lengths.tolist() == [32768, 32768, 81408 - 2048 - 65536]
    assert one.into.tolist() == [384, 384 + 32768, 384 + 65536]  # 2048 - 1664 bytes into the output
    assert np.array_equal(one.covered(rows.size), (file_lo >= 2048) & (file_hi <= 81408) & (rows < 510))
    # run 2: file bytes from 112064, output from 501 * 160: congruent when the output starts at 160 mod 512
    two = plan(4096 * 7 + 160)
    assert two.offsets.tolist() == [112128, 112128 + 32768] and two.total == 175616 - 112128
    assert (4096 * 7 + 160 + two.into[0]) % 512 == 0
    assert np.array_equal(two.covered(rows.size), (file_lo >= 112128) & (file_hi <= 175616) & (rows >= 700))
    assert all(o % 512 == 0 and n % 512 == 0 for o, n in zip(two.offsets, two.lengths, strict=True))
    # neither run congruent, runs shorter than min_bytes, rows out of order in the output: nothing goes straight in
    assert plan(4096 * 7).offsets.size == 0 and not plan(4096 * 7).covered(rows.size).any()
    assert plan(4096 * 7 + 128, min_bytes=1 << 20).offsets.size == 0
    assert (
        plan_direct_reads(
            rows,
            slots[::-1].copy(),
            out_address=4096 * 7 + 128,
            data_offset=64,
            row_bytes=160,
            alignment=SECTOR,
            min_bytes=4096,
        ).offsets.size
        == 0
    )


def _batches(num_rows: int, first: int, seed: int) -> list[np.ndarray]:
    """Batches with long runs, scattered rows, runs in reverse, runs ending at the last row, and repeats."""
    gen = np.random.default_rng(seed)
    last = num_rows - first
    run = np.arange(37, 37 + 900)
    tail = np.arange(last - 700, last)
    scattered = gen.choice(np.arange(1000, last - 800), 200, replace=False)
    return [
        np.concatenate([run, scattered, tail]),
        np.concatenate([scattered[:50], run[::-1], tail]),
        np.concatenate([run, run[:5]]),
        np.arange(0, last),
        gen.permutation(last)[:1500],
    ]


@pytest.mark.parametrize("row_floats", [40, 128, 1025])
@pytest.mark.parametrize("mode", ["direct", "page-cache"])
def test_rows_read_straight_into_the_output_are_the_rows_the_file_holds(tmp_path, mode, row_floats):
    path, values = write_features(tmp_path, 5000, row_floats, seed=row_floats)
    if mode == "direct" and not direct_supported(path):
        pytest.skip(f"{tmp_path} does not support O_DIRECT")
    first, row_bytes = 123, row_floats * 4
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path) + first * row_bytes,
        row_bytes=row_bytes,
        first_row=0,
        num_rows=5000 - first,
        mode=mode,
        inflight=4,
        max_request=65536,
    )
    try:
        for i, batch in enumerate(_batches(5000, first, row_floats)):
            for shift in (0, 64):  # the reader's own rows, and rows one cache line off (staged where they miss)
                rows = reader.empty_rows(batch.size + 3).view(-1)[shift : shift + (batch.size + 2) * row_bytes]
                rows = rows.view(batch.size + 2, row_bytes)
                rows[batch.size :] = 7
                reader.read(batch, rows.numpy())
                got = rows[: batch.size].view(torch.float32).numpy()
                assert np.array_equal(got, values[first + batch]), f"batch {i}, shift {shift}"
                assert bool((rows[batch.size :] == 7).all())
        assert reader.stats.direct_requests > 0  # the runs of the reader's own rows went straight in
        assert reader.stats.requests > reader.stats.direct_requests  # and the scattered rows through staging
    finally:
        reader.close()


def test_reads_into_an_output_the_alignment_rules_out_still_give_the_rows(tmp_path):
    path, values = write_features(tmp_path, 3000, 128)
    if not direct_supported(path):
        pytest.skip(f"{tmp_path} does not support O_DIRECT")
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path),
        row_bytes=512,
        first_row=0,
        num_rows=3000,
        mode="direct",
        inflight=4,
        alignment=FALLBACK,
    )
    try:
        out = reader.empty_rows(3001)[1:]  # one row past a page-congruent start: 512 B off the page alignment
        batch = np.arange(100, 2900)
        reader.read(batch, out.numpy())
        assert np.array_equal(out[: batch.size].view(torch.float32).numpy(), values[batch])
        assert reader.stats.direct_requests == 0
    finally:
        reader.close()


def test_the_files_alignment_is_what_o_direct_accepts(tmp_path):
    path, _ = write_features(tmp_path, 64, 128)
    alignment = direct_io_alignment(path)
    assert alignment.memory & (alignment.memory - 1) == 0 and alignment.offset & (alignment.offset - 1) == 0
    assert direct_io_alignment(tmp_path / "missing") == FALLBACK
    if not alignment.reported or not direct_supported(path):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:  # a read spanning pages, from the first memory-aligned byte past a page and the first aligned offset
        into = memoryview(bytearray(5 * 4096)).cast("B")
        start = -np.frombuffer(into, np.uint8).ctypes.data % 4096 + alignment.memory
        assert os.preadv(fd, [into[start : start + 3 * 4096]], alignment.offset) == 3 * 4096
        assert (
            bytes(into[start : start + 3 * 4096]) == path.read_bytes()[alignment.offset : alignment.offset + 3 * 4096]
        )
    finally:
        os.close(fd)


def test_a_truncated_file_and_a_strided_or_read_only_output_are_refused(tmp_path):
    path, values = write_features(tmp_path, 1000, 128)
    with pytest.raises(GraphtierError, match=r"holds .* bytes, but its 1,001 rows of 512 B .* the file is truncated"):
        StorageReader(
            path, data_offset=npy_data_offset(path), row_bytes=512, first_row=0, num_rows=1001, mode="page-cache"
        )
    reader = StorageReader(
        path, data_offset=npy_data_offset(path), row_bytes=512, first_row=0, num_rows=1000, mode="page-cache"
    )
    try:
        strided = np.zeros((20, 256), np.float32)[:, ::2]
        with pytest.raises(GraphtierError, match="C-contiguous rows; got an array with strides"):
            reader.read(np.arange(10), strided)
        with pytest.raises(GraphtierError, match=r"10 rows of 512 B asked for, into an array of 5 rows of 512 B"):
            reader.read(np.arange(10), np.zeros((5, 128), np.float32))
        assert not strided.any()
        read_only = np.zeros((10, 128), np.float32)
        read_only.flags.writeable = False
        with pytest.raises(GraphtierError, match="writable rows; got a read-only array"):
            reader.read(np.arange(10), read_only)
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"max_request": 0}, "max_request 0: requests are a positive multiple of 4096 B"),
        ({"max_request": 5000}, "max_request 5000"),
        ({"row_bytes": 0}, "need row bytes > 0"),
        ({"first_row": 1001}, r"storage rows \[1001, 1000\)"),
        ({"data_offset": -1}, "a data offset >= 0"),
        ({"alignment": DirectIOAlignment(memory=3, offset=512, reported=True)}, "O_DIRECT alignment 3 B / 512 B"),
    ],
)
def test_a_reader_that_could_not_read_right_is_refused_naming_the_value(tmp_path, change, named):
    path, _ = write_features(tmp_path, 1000, 128)
    geometry = {"data_offset": npy_data_offset(path), "row_bytes": 512, "first_row": 0, "num_rows": 1000, **change}
    with pytest.raises(GraphtierError, match=named):
        StorageReader(path, mode="page-cache", **geometry)


def test_bad_rows_a_closed_reader_and_a_misaligned_direct_read_get_clear_errors(tmp_path):
    path, values = write_features(tmp_path, 3000, 128)
    reader = StorageReader(
        path, data_offset=npy_data_offset(path), row_bytes=512, first_row=0, num_rows=3000, mode="page-cache"
    )
    out = np.zeros((10, 128), np.float32)
    for bad in (np.zeros((2, 5), np.int64), np.array([1.9, 2.0]), np.array([True, False]), np.int64(3)):
        with pytest.raises(GraphtierError, match="storage rows are a 1-D array of integers"):
            reader.read(bad, out)
    reader.close()
    with pytest.raises(GraphtierError, match="the storage reader was closed"):
        reader.read(np.arange(3), out)
    asked = direct_io_alignment(path)
    if not (asked.reported and asked.memory > 1 and direct_supported(path)):
        return  # the filesystem takes any alignment: nothing to misalign
    # told that any address will do, the reader sends a run into rows one byte off: the kernel refuses it
    reader = StorageReader(
        path,
        data_offset=npy_data_offset(path),
        row_bytes=512,
        first_row=0,
        num_rows=3000,
        mode="direct",
        alignment=DirectIOAlignment(memory=1, offset=asked.offset, reported=False),
    )
    try:
        rows = reader.empty_rows(2001).view(-1)[1 : 1 + 2000 * 512].view(2000, 512)
        with pytest.raises(GraphtierError, match=rf"aligned to 1 B in memory .* the file asks {asked.memory} B"):
            reader.read(np.arange(500, 2500), rows.numpy())
    finally:
        reader.close()
