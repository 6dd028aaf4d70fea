"""Splits that come with the data: `dataset prepare --split FILE [--split-index K]` with an .npz of
masks (one split, or Geom-GCN/PyG style [N, K]) or of id arrays, in the source's ids; prepare says
which split it used, the dataset maps its ids back to the source's, and bad files are refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphtier.contract.errors import DatasetSourceError
from graphtier.launcher.cli.app import app
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.sources import load_source

NUM_NODES = 2708  # gnn-benchmark's Cora, which ships no split


@pytest.fixture
def cora_npz(shared_datasets):
    return f"npz:{shared_datasets / 'gnn_benchmark_npz' / 'cora.npz'}"


def _masks(k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(k)
    masks = {name: np.zeros((NUM_NODES, 3), dtype=bool) for name in ("train_mask", "val_mask", "test_mask")}
    for column in range(3):
        order = rng.permutation(NUM_NODES)
        for name, part in zip(masks, (order[:1600], order[1600:2100], order[2100:]), strict=True):
            masks[name][part, column] = True
    return masks


def test_masks_of_several_splits_need_an_index_and_give_that_split(cora_npz, tmp_path):
    masks = _masks(0)
    path = tmp_path / "film_split_0.6_0.2_K.npz"
    np.savez(path, **masks)
    with pytest.raises(DatasetSourceError, match=r"'train_mask' holds 3 splits \(choose one with --split-index K\)"):
        load_source(cora_npz, split_file=str(path))
    graph = load_source(cora_npz, split_file=str(path), split_index=2)
    for part, key in (("train", "train_mask"), ("val", "val_mask"), ("test", "test_mask")):
        assert torch.equal(graph.splits[part], torch.from_numpy(np.flatnonzero(masks[key][:, 2])))
    assert graph.description["split"]["index"] == 2 and graph.description["split"]["counts"]["train"] == 1600
    with pytest.raises(DatasetSourceError, match="--split-index 3 is outside the 3 splits"):
        load_source(cora_npz, split_file=str(path), split_index=3)
    overlapping = {**masks, "test_mask": masks["test_mask"] | masks["train_mask"]}
    np.savez(path, **overlapping)
    with pytest.raises(DatasetSourceError, match=r"splits 'train' and 'test' share 1600 node id\(s\)"):
        load_source(cora_npz, split_file=str(path), split_index=2)
    np.savez(path, train_mask=masks["train_mask"][:100])
    with pytest.raises(DatasetSourceError, match=r"does not cover the graph's 2708 nodes"):
        load_source(cora_npz, split_file=str(path), split_index=0)
    np.savez(path, labels=np.arange(3))
    with pytest.raises(DatasetSourceError, match=r"no train ids in it \(keys \['labels'\]\)"):
        load_source(cora_npz, split_file=str(path))
    with pytest.raises(DatasetSourceError, match="split_index 1 chooses among a split file's splits"):
        load_source(cora_npz, split_index=1)


def test_prepare_with_id_arrays_says_which_split_and_maps_ids_back(cora_npz, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    order = np.random.default_rng(1).permutation(NUM_NODES)
    split = tmp_path / "split.npz"
    np.savez(split, train_idx=order[:100], valid_idx=order[100:300], test_idx=order[300:600])
    root = tmp_path / "prepared"
    done = CliRunner().invoke(
        app, ["dataset", "prepare", cora_npz, "--name", "c", "--split", str(split), "--out", str(root)]
    )
    assert done.exit_code == 0, done.output
    assert f"split: train/val/test 100/200/300 from {split}" in done.output
    dataset = PreparedDataset.open("c", root)
    assert dataset.manifest.source_description["split"]["keys"] == {
        "train": "train_idx",
        "val": "valid_idx",
        "test": "test_idx",
    }
    for part, ids in (("train", order[:100]), ("val", order[100:300]), ("test", order[300:600])):
        inside = dataset.split(part)  # hotness ranks
        assert not torch.equal(inside.sort().values, torch.from_numpy(np.sort(ids)))
        assert torch.equal(dataset.source_ids(inside).sort().values, torch.from_numpy(np.sort(ids)))
    refused = CliRunner().invoke(
        app, ["dataset", "prepare", cora_npz, "--name", "d", "--split", str(tmp_path / "none.npz"), "--out", str(root)]
    )
    assert refused.exit_code == 2 and "none.npz: does not exist (--split)" in refused.output


def test_a_source_with_its_own_split_or_a_random_one_says_so(shared_datasets, cora_npz, tmp_path):
    from graphtier.launcher.cli.dataset import split_summary

    root = tmp_path / "prepared"
    planetoid = f"planetoid:{shared_datasets / 'planetoid_cora'}"
    prepare_dataset(PrepareConfig(source=planetoid, name="p", root=root))
    assert split_summary(PreparedDataset.open("p", root).manifest).startswith(
        "train/val/test 140/500/1,000: the source's own (planetoid standard"
    )
    prepare_dataset(PrepareConfig(source=cora_npz, name="r", root=root, source_options={"split_seed": 3}))
    assert split_summary(PreparedDataset.open("r", root).manifest) == (
        "train/val/test 270/135/270: random 0.1/0.05/0.1 of the labelled nodes, split seed 3"
    )
