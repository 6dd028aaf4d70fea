"""Labels must be class indices: a label of 1e9 is refused at prepare, naming it, instead of
preparing '1000000001 classes' and failing the job with a 1 TB allocation."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import scipy.sparse as sp


def _npz(path, labels):
    n = labels.shape[0]
    adj = sp.random(n, n, density=0.1, format="csr", random_state=0)
    np.savez(path, adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr, adj_shape=adj.shape,
             attr_data=np.ones(n, dtype=np.float32), attr_indices=np.zeros(n, dtype=np.int64),
             attr_indptr=np.arange(n + 1), attr_shape=(n, 1), labels=labels)  # fmt: skip


def _prepare(tmp_path, labels):
    _npz(tmp_path / "g.npz", labels)
    return subprocess.run([sys.executable, "-m", "graphtier.launcher.cli", "dataset", "prepare", f"npz:{tmp_path}/g.npz",
                           "--name", "lab", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)  # fmt: skip


def test_a_huge_label_is_refused_naming_label_node_and_classes(tmp_path):
    labels = np.zeros(50, dtype=np.int64)
    labels[7] = 1_000_000_000
    done = _prepare(tmp_path, labels)
    assert done.returncode == 2
    assert "label 1000000000 (node 7) implies 1000000001 classes but only 2 distinct labels are used" in " ".join(
        (done.stdout + done.stderr).split())
    assert not (tmp_path / "out" / "lab").exists()


def test_dense_labels_with_gaps_still_prepare(tmp_path):
    labels = np.arange(50, dtype=np.int64) % 5 * 2  # classes 0, 2, 4, 6, 8: sparse but small
    done = _prepare(tmp_path, labels)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_graph_of_isolated_nodes_is_called_what_it_is(tmp_path):
    n = 30
    adj = sp.csr_matrix((n, n))
    np.savez(tmp_path / "iso.npz", adj_data=adj.data, adj_indices=adj.indices, adj_indptr=adj.indptr,
             adj_shape=adj.shape, attr_data=np.ones(n, dtype=np.float32), attr_indices=np.zeros(n, dtype=np.int64),
             attr_indptr=np.arange(n + 1), attr_shape=(n, 1), labels=np.arange(n, dtype=np.int64) % 3)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "graphtier.launcher.cli", "dataset", "prepare", f"npz:{tmp_path}/iso.npz",
                           "--name", "iso", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2
    assert "the graph has 30 nodes but no edges: every node is isolated" in " ".join((done.stdout + done.stderr).split())
