"""A heterogeneous dataset's storage rows are checked per row, per node type, on every read path."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage.row_checksums import row_checksums
from graphtier.service.store import SharedDatasetStore, attach_dataset
from graphtier.service.tiering.hetero import hetero_plans


@pytest.mark.parametrize("storage_reads", ["mmap", "page-cache"])
def test_a_hetero_storage_row_changed_after_the_load_fails_the_read_naming_its_file(
    hetero_root, tmp_path, storage_reads
):
    prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="heterogeneous", root=tmp_path / "prepared"))
    ds = PreparedDataset.open("heterogeneous", tmp_path / "prepared")
    schema = ds.manifest.hetero
    paper = schema.type_named("paper")
    recorded = ds.array(f"feature_checksums.{paper.name}").numpy()
    assert np.array_equal(recorded, row_checksums(ds.array(paper.feature_array).numpy()))  # one per row, per type

    no_budget = TierBudgets(device_replicated_bytes=0, num_devices=0, host_bytes=0)
    plans = hetero_plans(schema, ds.scores, no_budget)  # every featured row left on storage
    structure = PlacementPlan(
        num_nodes=schema.num_nodes, row_bytes=0, num_devices=0, replicated_end=0, interleaved_end=0,
        host_end=schema.num_nodes,
    )  # fmt: skip
    rows = ds.array(paper.feature_array)
    ids = torch.arange(rows.shape[0])
    with SharedDatasetStore(ds, structure, hetero_plans=plans) as store:
        data = attach_dataset(store.handle, storage_reads=storage_reads)
        try:
            out = torch.empty_like(rows)
            data.gather_hetero(paper.name, ids, out)  # as prepared: every row passes
            assert torch.equal(out, rows)
            path = ds.array_path(paper.feature_array)
            with open(path, "r+b") as f:  # row 5 changed in place, as a careless writer would
                f.seek(npy_data_offset(path) + 5 * rows[0].numel() * rows.element_size())
                f.write(np.full(rows.shape[1], 7.5, rows.numpy().dtype).tobytes())
                f.flush()
                os.fsync(f.fileno())
            with pytest.raises(PreparedDatasetError) as failure:
                data.gather_hetero(paper.name, ids, out)
        finally:
            data.detach()
    said = str(failure.value)
    assert str(path) in said and "block of rows [5, 6)" in said and "changed after it was prepared" in said
