"""Storage rows are checked against the per-row checksums recorded at prepare, on every read path."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.gather.tiered_gather import gather_split
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage import LookaheadWindow
from graphtier.service.storage.row_checksums import CHECKSUM_ARRAY, row_checksums
from graphtier.service.store import SharedDatasetStore, attach_dataset


@pytest.fixture
def tamperable(tmp_path) -> PreparedDataset:
    """A small prepared dataset of this test's own: its features file is overwritten in place."""
    prepare_dataset(
        PrepareConfig(
            source="synthetic:rmat", name="rmat9", root=tmp_path, source_options={"scale": 9, "feature_dim": 16}
        )
    )
    return PreparedDataset.open("rmat9", tmp_path)


def _plan(ds: PreparedDataset, host_rows: int) -> PlacementPlan:
    n, row = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        num_devices=0,
        device_replicated_bytes=0,
        device_interleaved_bytes=0,
        host_bytes=host_rows * row,
        structure_device_bytes=0,
    )
    return PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row)


def _overwrite_row(ds: PreparedDataset, row: int) -> None:
    """Row `row` of features.npy changed in place (same file, same size), as a careless writer would."""
    path, row_bytes = ds.array_path("features"), ds.manifest.feature_row_bytes
    with open(path, "r+b") as f:
        f.seek(npy_data_offset(path) + row * row_bytes)
        f.write(np.full(row_bytes // 4, 7.5, np.float32).tobytes())
        f.flush()
        os.fsync(f.fileno())


def test_prepare_records_a_checksum_per_feature_row(tamperable):
    recorded = tamperable.array(CHECKSUM_ARRAY).numpy()
    assert recorded.shape == (tamperable.manifest.num_nodes,) and recorded.dtype == np.int64
    assert np.array_equal(recorded, row_checksums(tamperable.features.numpy()))
    tamperable.verify()  # the checksum file is listed in the manifest with its own sha256 and BLAKE3


@pytest.mark.parametrize("mode", ["mmap", "mmap-window", "page-cache", "direct"])
def test_a_storage_row_changed_after_the_load_fails_the_read_naming_file_and_block(tamperable, mode):
    storage_reads = mode.removesuffix("-window")
    if storage_reads == "direct":
        try:
            os.close(os.open(tamperable.array_path("features"), os.O_RDONLY | os.O_DIRECT))
        except OSError:
            pytest.skip("the dataset's filesystem does not support O_DIRECT")
    n, host_end = tamperable.manifest.num_nodes, 100
    ids = torch.arange(host_end - 20, n)  # resident rows and every storage row
    with SharedDatasetStore(tamperable, _plan(tamperable, host_end)) as store:
        data = attach_dataset(store.handle, storage_reads=storage_reads)
        window = (
            LookaheadWindow(data.row_reader(), row_bytes=data.feature_tiers().row_bytes) if "window" in mode else None
        )

        def gather() -> None:
            out = torch.empty(ids.numel(), tamperable.manifest.feature_dim)
            if window is None:
                data.gather(ids, out)
            else:  # as the producer's WindowedTiers reads: admitted when sampled, filled when gathered
                ticket = window.admit((ids[ids >= host_end] - host_end).numpy())
                gather_split(ids, data.feature_tiers(), out, lambda rows, rows_out: window.fill(ticket, rows, rows_out))
            assert torch.equal(out, tamperable.features[ids])

        try:
            gather()  # as prepared: every row passes
            _overwrite_row(tamperable, host_end + 37)
            with pytest.raises(PreparedDatasetError) as failure:
                gather()
        finally:
            if window is not None:
                window.close()
            data.detach()
    said = str(failure.value)
    assert str(tamperable.array_path("features")) in said
    assert f"block of rows [{host_end + 37}, {host_end + 38})" in said and "changed after it was prepared" in said
