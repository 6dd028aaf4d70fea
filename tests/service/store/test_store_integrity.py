"""A dataset whose files changed since `prepare` is refused at load, naming the file; nothing is served."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.store import SharedDatasetStore


@pytest.fixture
def dataset_copy(tmp_path, small_rmat):
    """A private copy of the small R-MAT dataset that a test may damage."""
    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    return root


def _flip(path, at_fraction: float) -> int:
    """Flip a bit of the byte `at_fraction` into the data of the .npy file `path`; its offset."""
    offset = npy_data_offset(path)
    size = os.path.getsize(path)
    position = offset + int((size - offset) * at_fraction)
    _flip_byte(path, position)
    return position


def _flip_byte(path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)
        f.seek(position)
        f.write(bytes([byte[0] ^ 0x10]))


def _plan(ds: PreparedDataset, host_fraction: float) -> PlacementPlan:
    n, row = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        num_devices=0,
        device_replicated_bytes=0,
        device_interleaved_bytes=0,
        host_bytes=int(n * row * host_fraction),
        structure_device_bytes=0,
    )
    return PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row)


@pytest.mark.parametrize(
    ("key", "where", "host_fraction"),
    [
        ("features", 0.1, 1.0),  # a resident row
        ("features", 0.9, 0.5),  # a row left on storage, never copied
        ("features", 0.5, 0.0),  # every row on storage
        ("row", 0.5, 1.0),
        ("train_ids", 0.0, 1.0),
    ],
)
def test_a_flipped_bit_anywhere_in_a_served_array_is_refused(dataset_copy, key, where, host_fraction):
    ds = PreparedDataset.open("rmat12", dataset_copy)
    path = ds.array_path(key)
    position = _flip(path, where)
    ds = PreparedDataset.open("rmat12", dataset_copy)  # same size: opening does not notice
    with pytest.raises(PreparedDatasetError, match=rf"{path}: checksum mismatch for '{key}'.*nothing was loaded") as e:
        SharedDatasetStore(ds, _plan(ds, host_fraction))
    if key == "features":  # feature rows have recorded checksums of their own: the row is named
        row = (position - npy_data_offset(path)) // ds.manifest.feature_row_bytes
        assert f", first at row {row} (bytes " in str(e.value)


def test_chunks_aligned_with_nothing_serve_the_files_bytes_and_any_flipped_byte_is_refused(dataset_copy, monkeypatch):
    """The verified copy reads, hashes and writes one chunk at a time. With chunks far smaller than
    the arrays and aligned with nothing (the .npy header, the rows, the resident/storage split), the
    segments hold exactly the files' data, and a byte flipped on either side of the split (in the
    chunk that straddles it) or at the file's very end is refused naming the file and the row."""
    from graphtier.service.store import attach_dataset, verified_copy

    monkeypatch.setattr(verified_copy, "CHUNK_BYTES", 4093)  # a prime: no chunk boundary meets a row or a page
    ds = PreparedDataset.open("rmat12", dataset_copy)
    plan = _plan(ds, 0.5)
    files = {key: np.load(ds.array_path(key), mmap_mode="r") for key in ("features", "row", "colptr", "labels")}
    with SharedDatasetStore(ds, plan) as store:
        served = attach_dataset(store.handle)
        assert served.resident is not None and 0 < plan.host_end < plan.num_nodes
        assert np.array_equal(served.resident.numpy(), files["features"][: plan.host_end])
        assert np.array_equal(served.graph.row.numpy(), files["row"])
        assert np.array_equal(served.graph.colptr.numpy(), files["colptr"])
        assert served.labels is not None and np.array_equal(served.labels.numpy(), files["labels"])
        del served
    path = ds.array_path("features")
    split = npy_data_offset(path) + plan.host_end * plan.row_bytes
    for position in (split - 1, split, os.path.getsize(path) - 1):
        _flip_byte(path, position)
        ds = PreparedDataset.open("rmat12", dataset_copy)
        row = (position - npy_data_offset(path)) // plan.row_bytes
        refused = rf"{path}: checksum mismatch for 'features' .*, first at row {row} .*nothing was loaded"
        with pytest.raises(PreparedDatasetError, match=refused):
            SharedDatasetStore(ds, plan)
        _flip_byte(path, position)  # back as prepared


@pytest.mark.parametrize("verify", [True, False])
def test_a_file_cut_short_while_loading_names_the_file_and_how_much_was_there(tmp_path, verify):
    from graphtier.service.prepared.manifest import ArrayInfo
    from graphtier.service.shm import SegmentOwner
    from graphtier.service.store.verified_copy import CHUNK_BYTES, copy_array

    path = tmp_path / "row.npy"
    np.save(path, np.arange(CHUNK_BYTES // 4, dtype=np.int64))  # two chunks of data
    os.truncate(path, npy_data_offset(path) + 1000)  # as if cut after the dataset was opened
    expected = ArrayInfo(file="row.npy", shape=[CHUNK_BYTES // 4], dtype="int64", nbytes=2 * CHUNK_BYTES, sha256="0")
    with SegmentOwner() as owner:
        segment, tensor = owner.create_tensor("cut", (CHUNK_BYTES // 4,), torch.int64)
        place = (segment.path, segment.ref_for(tensor).offset)
        cut = rf"{path}: truncated: 'row' ends after 1000 of {2 * CHUNK_BYTES} bytes"
        with pytest.raises(PreparedDatasetError, match=cut):
            copy_array(path, "row", tensor, place, expected if verify else None)


def test_loads_check_blake3_and_a_dataset_prepared_without_it_is_checked_by_sha256(dataset_copy):
    import json

    from graphtier.service.prepared.digests import file_digest

    ds = PreparedDataset.open("rmat12", dataset_copy)
    for info in ds.manifest.arrays.values():  # prepare records both; the load checks the cheaper one
        assert info.blake3 == file_digest(ds.directory / info.file, "blake3")
        assert info.sha256 == file_digest(ds.directory / info.file, "sha256")
    manifest_path = ds.directory / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for info in manifest["arrays"].values():
        del info["blake3"]  # as written before BLAKE3 was recorded
    manifest_path.write_text(json.dumps(manifest))
    ds = PreparedDataset.open("rmat12", dataset_copy)
    with SharedDatasetStore(ds, _plan(ds, 1.0)) as store:
        assert store.verify_seconds > 0
    _flip(ds.array_path("features"), 0.3)
    ds = PreparedDataset.open("rmat12", dataset_copy)
    with pytest.raises(PreparedDatasetError, match=r"checksum mismatch for 'features' \(sha256: "):
        SharedDatasetStore(ds, _plan(ds, 1.0))


def test_an_intact_dataset_loads_and_verification_can_be_skipped(dataset_copy):
    ds = PreparedDataset.open("rmat12", dataset_copy)
    with SharedDatasetStore(ds, _plan(ds, 0.5)) as store:
        assert store.verify_seconds > 0
    _flip(ds.array_path("features"), 0.5)
    ds = PreparedDataset.open("rmat12", dataset_copy)
    with SharedDatasetStore(ds, _plan(ds, 1.0), verify=False) as store:
        assert store.verify_seconds == 0


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_loaded_segments_are_read_only_by_mode_and_mapping(small_rmat):
    import signal
    import stat
    import subprocess
    import sys
    import textwrap

    ds = PreparedDataset.open("rmat12", small_rmat.directory.parent)
    with SharedDatasetStore(ds, _plan(ds, 1.0)) as store:
        for segment in store.owner.segments.values():
            assert segment.sealed and stat.S_IMODE(os.stat(segment.path).st_mode) == 0o400
    code = """
        from graphtier.service.shm import SegmentOwner
        with SegmentOwner() as owner:
            segment, tensor = owner.create_tensor("sealed", (1024,), "float32")
            tensor.fill_(1.0)
            segment.seal()
            assert float(tensor.sum()) == 1024.0  # reads still work
            print("sealed", flush=True)
            tensor[0] = 2.0  # a stray write by the owner itself
    """
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == "sealed"
    assert child.returncode == -signal.SIGSEGV
    from graphtier.service.shm import reclaim_stale_segments

    reclaim_stale_segments()  # the crashed child's segment


def test_a_damaged_npy_header_names_the_file(dataset_copy):
    path = dataset_copy / "rmat12" / "labels.npy"
    data = bytearray(path.read_bytes())
    data[10:40] = b"{'descr': '<x9', 'garbage':!!}"  # the header dict, mangled (same size)
    path.write_bytes(bytes(data))
    ds = PreparedDataset.open("rmat12", dataset_copy)
    with pytest.raises(PreparedDatasetError, match=rf"{path}: cannot read array 'labels' .*prepare it again"):
        ds.array("labels")
