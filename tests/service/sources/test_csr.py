"""CSR without scipy: `Csr` expands and densifies exactly as scipy's csr_matrix does (scipy is the
reference here, and in the tests only), refuses what scipy's full format check refuses with its
words, and the Planetoid and npz readers load the shared files with scipy unimportable."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from graphtier.service.sources.csr import Csr
from graphtier.service.sources.npz import load_npz
from graphtier.service.sources.planetoid import load_planetoid


def _random_csr(rng: np.random.Generator, dtype: np.dtype, rows: int = 40, cols: int = 30):
    """Unsorted column indices, duplicate entries, empty rows and stored zeros, plus two entries past
    indptr[-1] (which scipy prunes)."""
    counts = rng.integers(0, 6, rows)
    counts[::7] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = rng.integers(0, cols, int(indptr[-1]) + 2).astype(np.int32)
    data = (rng.integers(-2, 3, indices.size) if dtype != np.bool_ else rng.integers(0, 2, indices.size)).astype(dtype)
    return data, indices, indptr, (rows, cols)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, np.bool_])
def test_expansion_and_dense_match_scipy(dtype):
    rng = np.random.default_rng(7)
    for _ in range(20):
        data, indices, indptr, shape = _random_csr(rng, np.dtype(dtype))
        ours = Csr.checked(data, indices, indptr, shape)
        reference = sp.csr_matrix((data, indices, indptr), shape=shape)
        reference.check_format(full_check=True)
        coo = reference.tocoo()
        assert np.array_equal(ours.rows(), coo.row) and np.array_equal(ours.indices, coo.col)
        assert np.array_equal(ours.data, coo.data) and ours.data.dtype == coo.data.dtype
        dense = ours.dense()
        assert dense.dtype == reference.dtype and np.array_equal(dense, reference.toarray())


def test_dense_of_sorted_entries_and_of_an_empty_matrix():
    ours = Csr.checked(np.array([1.0, 2.0]), np.array([2, 0]), np.array([0, 1, 1, 2]), np.array([3, 4]))
    assert ours.dense().tolist() == [[0, 0, 1, 0], [0, 0, 0, 0], [2, 0, 0, 0]]
    assert Csr.checked(np.zeros(0), np.zeros(0, dtype=int), np.zeros(1, dtype=int), (0, 5)).dense().shape == (0, 5)


_SHAPE = (3, 4)
_GOOD = (np.ones(3), np.array([0, 1, 2]), np.array([0, 1, 2, 3]))


@pytest.mark.parametrize(
    "data, indices, indptr, message",
    [
        (_GOOD[0], _GOOD[1], np.array([0, 1, 3]), "index pointer size 3 should be 4"),
        (_GOOD[0], _GOOD[1], np.array([1, 1, 2, 3]), "index pointer should start with 0"),
        (np.ones(2), _GOOD[1], _GOOD[2], "indices and data should have the same size"),
        (_GOOD[0], _GOOD[1], np.array([0, 1, 2, 4]), "Last value of index pointer should be less than"),
        (_GOOD[0], np.array([0, 1, 4]), _GOOD[2], "indices must be < 4"),
        (_GOOD[0], np.array([0, -1, 2]), _GOOD[2], "indices must be >= 0"),
        (_GOOD[0], _GOOD[1], np.array([0, 2, 1, 3]), "indptr must be a non-decreasing sequence"),
        (np.ones((3, 1)), _GOOD[1], _GOOD[2], "data, indices, and indptr should be 1-D"),
    ],
)
def test_refuses_what_scipy_refuses_in_its_words(data, indices, indptr, message):
    with pytest.raises(ValueError, match=message):
        Csr.checked(data, indices, indptr, _SHAPE)
    with pytest.raises(ValueError, match=message):
        sp.csr_matrix((data, indices, indptr), shape=_SHAPE).check_format(full_check=True)


@pytest.mark.parametrize(
    "data, indices, indptr, shape, message",
    [
        (_GOOD[0], _GOOD[1].astype(np.float64), _GOOD[2], _SHAPE, "indices array has non-integer dtype"),
        (_GOOD[0], _GOOD[1], _GOOD[2].astype(np.float32), _SHAPE, "indptr array has non-integer dtype"),
        (np.array(["a", "b", "c"]), _GOOD[1], _GOOD[2], _SHAPE, "data array has non-numeric dtype"),
        (*_GOOD, (3, -4), "negative dimension"),
        (*_GOOD, (3,), "shape must be two integers"),
        (*_GOOD, np.array(5), "shape must be two integers"),
    ],
)
def test_refuses_what_scipy_would_cast_or_misread(data, indices, indptr, shape, message):
    with pytest.raises(ValueError, match=message):
        Csr.checked(data, indices, indptr, shape)


def _trusted_pickle(path):
    """The file read with the plain pickle module and scipy, as the Planetoid authors read it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with open(path, "rb") as handle:
            return pickle.load(handle, encoding="latin1")


@pytest.mark.parametrize("name", ["cora", "citeseer", "pubmed"])
def test_shared_planetoid_features_are_scipys(shared_datasets, name):
    directory = shared_datasets / f"planetoid_{name}"
    g = load_planetoid(directory, missing_features="zeros")
    tx = _trusted_pickle(directory / f"ind.{name}.tx").toarray()
    assert np.array_equal(g.features.numpy()[g.splits["test"].numpy()], tx)
    first = "allx" if (directory / f"ind.{name}.allx").is_file() else "x"
    rows = _trusted_pickle(directory / f"ind.{name}.{first}").toarray()
    assert np.array_equal(g.features.numpy()[: rows.shape[0]], rows)


@pytest.mark.parametrize("name", ["cora", "citeseer"])
def test_shared_npz_edges_and_features_are_scipys(shared_datasets, name):
    path = shared_datasets / "gnn_benchmark_npz" / f"{name}.npz"
    g = load_npz(path)
    with np.load(path) as npz:
        adj = sp.csr_matrix((npz["adj_data"], npz["adj_indices"], npz["adj_indptr"]), shape=npz["adj_shape"]).tocoo()
        attr = sp.csr_matrix((npz["attr_data"], npz["attr_indices"], npz["attr_indptr"]), shape=npz["attr_shape"])
    keep = adj.data != 0
    assert torch.equal(g.src, torch.from_numpy(adj.row[keep].astype(np.int64)))
    assert torch.equal(g.dst, torch.from_numpy(adj.col[keep].astype(np.int64)))
    assert torch.equal(g.features, torch.from_numpy(attr.toarray().astype(np.float32)))


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_readers_load_the_shared_files_with_scipy_unimportable(shared_datasets):
    script = f"""
import sys
sys.modules["scipy"] = None  # any `import scipy...` now raises ImportError
from graphtier.service.sources.npz import load_npz
from graphtier.service.sources.planetoid import load_planetoid
g = load_planetoid({str(shared_datasets / "planetoid_cora")!r})
h = load_npz({str(shared_datasets / "gnn_benchmark_npz" / "cora.npz")!r})
print(g.num_nodes, g.num_edges, h.num_nodes, h.num_edges, sorted(m for m in sys.modules if m.startswith("scipy")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2708", "10858", "2708", "5429", "['scipy']"]
