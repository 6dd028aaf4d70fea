"""A loaded dataset's storage rows read per batch (`storage_reads`) give the mapping's bytes."""

from __future__ import annotations

import os

import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.store import SharedDatasetStore, attach_dataset


def _plan(ds, host_fraction):
    n, row = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        num_devices=0,
        device_replicated_bytes=0,
        device_interleaved_bytes=0,
        host_bytes=int(n * row * host_fraction),
        structure_device_bytes=0,
    )
    return PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row)


@pytest.mark.parametrize("mode", ["direct", "page-cache"])
def test_storage_reads_match_the_mapping(small_rmat, mode):
    if mode == "direct":
        try:
            os.close(os.open(small_rmat.array_path("features"), os.O_RDONLY | os.O_DIRECT))
        except OSError:
            pytest.skip("the dataset's filesystem does not support O_DIRECT")
    ids = torch.randint(0, small_rmat.manifest.num_nodes, (3000,), generator=torch.Generator().manual_seed(2))
    with SharedDatasetStore(small_rmat, _plan(small_rmat, 0.4)) as store:
        mapped = attach_dataset(store.handle)
        want = torch.empty(3000, small_rmat.manifest.feature_dim)
        want_counts = mapped.gather(ids, want)
        read = attach_dataset(store.handle, storage_reads=mode)
        got = torch.empty_like(want)
        assert read.gather(ids, got) == want_counts and want_counts.storage.rows > 0
        assert torch.equal(got, want) and torch.equal(want, small_rmat.features[ids])
        reader = read.feature_tiers().storage_reader
        assert reader is not None and reader.mode == mode and reader.stats.rows == want_counts.storage.rows
        assert mapped.feature_tiers().storage_reader is None and mapped.row_reader().mode == "mmap"
        assert read.row_reader() is reader
        read.detach()
        assert reader.fd == -1
        mapped.detach()


def test_an_unknown_storage_read_mode_is_named(small_rmat):
    with SharedDatasetStore(small_rmat, _plan(small_rmat, 0.4)) as store:
        with pytest.raises(GraphtierError, match="storage reads 'o_direct': expected one of mmap, direct, page-cache"):
            attach_dataset(store.handle, storage_reads="o_direct")
