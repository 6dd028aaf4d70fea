"""gnn-benchmark `.npz` reader: the shared Cora / CiteSeer match their README, bad archives
fail naming the file and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.csc import build_csc
from graphtier.service.sources.npz import load_npz


@pytest.mark.parametrize(
    "name, nodes, nnz, undirected, features, feature_nnz, classes",
    [("cora", 2708, 5429, 5278, 1433, 49216, 7), ("citeseer", 3312, 4715, 4536, 3703, 105165, 6)],
)
def test_shared_files(shared_datasets, name, nodes, nnz, undirected, features, feature_nnz, classes):
    g = load_npz(shared_datasets / "gnn_benchmark_npz" / f"{name}.npz")
    assert (g.num_nodes, g.num_edges) == (nodes, nnz)
    assert tuple(g.features.shape) == (nodes, features) and g.features.dtype == torch.float32
    assert int(g.features.count_nonzero()) == feature_nnz
    assert g.num_classes == classes and len(g.description["class_names"]) == classes
    assert g.splits == {}
    csc = build_csc(g.num_nodes, g.src, g.dst, undirected=True, drop_self_loops=True)
    assert csc.num_edges // 2 == undirected


def _arrays(n: int = 4) -> dict[str, np.ndarray]:
    """A 4-node cycle 0->1->2->3->0 with dense 2-d attributes and labels."""
    return {
        "adj_data": np.ones(n, dtype=np.float32),
        "adj_indices": (np.arange(n) + 1) % n,
        "adj_indptr": np.arange(n + 1),
        "adj_shape": np.array([n, n]),
        "attr_matrix": np.arange(2 * n, dtype=np.float32).reshape(n, 2),
        "labels": np.array([0, 1, 0, 1]),
    }


def _save(tmp_path: Path, **arrays) -> Path:
    path = tmp_path / "g.npz"
    np.savez(path, **arrays)
    return path


def test_dense_attributes_and_pickled_extras_are_skipped(tmp_path):
    arrays = _arrays()
    arrays["idx_to_node"] = np.array([{"a": 1}], dtype=object)  # would need pickle; never read
    g = load_npz(_save(tmp_path, **arrays))
    assert g.src.tolist() == [0, 1, 2, 3] and g.dst.tolist() == [1, 2, 3, 0]
    assert g.features[3].tolist() == [6.0, 7.0] and g.labels.tolist() == [0, 1, 0, 1]


def _error(path: Path) -> str:
    with pytest.raises(DatasetSourceError) as info:
        load_npz(path)
    return str(info.value)


def test_missing_key_names_it(tmp_path):
    arrays = _arrays()
    del arrays["adj_indptr"]
    message = _error(_save(tmp_path, **arrays))
    assert str(tmp_path / "g.npz") in message and "missing key 'adj_indptr'" in message


def test_shape_mismatches(tmp_path):
    arrays = _arrays()
    arrays["labels"] = np.array([0, 1, 0])
    assert "key 'labels' has shape (3,)" in _error(_save(tmp_path, **arrays))
    arrays = _arrays()
    arrays["attr_matrix"] = np.zeros((5, 2), dtype=np.float32)
    assert "attributes have 5 rows, adjacency has 4 nodes" in _error(_save(tmp_path, **arrays))
    arrays = _arrays()
    arrays["adj_indptr"] = np.array([0, 1, 2, 3, 9])
    assert "keys adj_* do not form a valid CSR matrix" in _error(_save(tmp_path, **arrays))


def test_object_labels_need_pickle_and_are_refused(tmp_path):
    arrays = _arrays()
    arrays["labels"] = np.array(["a", None, "b", "c"], dtype=object)
    message = _error(_save(tmp_path, **arrays))
    assert "key 'labels' cannot be read without pickle" in message


def test_corrupt_archive(tmp_path):
    path = tmp_path / "g.npz"
    path.write_bytes(b"PK\x03\x04 truncated zip")
    message = _error(path)
    assert str(path) in message and "not a readable .npz archive" in message
    assert "file not found" in _error(tmp_path / "absent.npz")
