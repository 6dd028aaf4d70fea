"""Planetoid reader: the shared Cora / CiteSeer / PubMed assemble as tkipf/gcn does, and
bad directories or pickles fail naming the file."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.csc import build_csc
from graphtier.service.sources.planetoid import load_planetoid


def _reference(directory: Path, name: str, part: str):
    """The file read with the plain (trusted) pickle module, as tkipf/gcn does."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with open(directory / f"ind.{name}.{part}", "rb") as handle:
            return pickle.load(handle, encoding="latin1")


def _class_counts(labels: torch.Tensor) -> list[int]:
    return torch.bincount(labels[labels >= 0]).tolist()


def test_cora(shared_datasets):
    g = load_planetoid(shared_datasets / "planetoid_cora")
    assert (g.num_nodes, g.num_edges) == (2708, 10858)
    assert tuple(g.features.shape) == (2708, 1433) and g.features.dtype == torch.float32
    assert _class_counts(g.labels) == [351, 217, 418, 818, 426, 298, 180]
    assert int((g.labels < 0).sum()) == 0
    assert g.splits["train"].tolist() == list(range(140))
    assert g.splits["val"].tolist() == list(range(140, 640))
    assert g.splits["test"].numel() == 1000 and int(g.splits["test"].min()) == 1708
    csc = build_csc(g.num_nodes, g.src, g.dst, undirected=True, drop_self_loops=True)
    assert csc.num_edges // 2 == 5278


def test_citeseer_padding_matches_tkipf_assembly(shared_datasets):
    directory = shared_datasets / "planetoid_citeseer"
    g = load_planetoid(directory)  # name inferred from the files
    assert g.description["name"] == "citeseer"
    assert (g.num_nodes, g.num_edges) == (3327, 9464)
    assert tuple(g.features.shape) == (3327, 3703)
    assert _class_counts(g.labels) == [249, 590, 668, 701, 596, 508]
    assert g.description["padded_test_ids"] == 15
    unlabelled = (g.labels < 0).nonzero().flatten()
    assert unlabelled.numel() == 15
    assert float(g.features[unlabelled].abs().sum()) == 0.0  # zero rows for the missing test ids
    assert not bool(torch.isin(unlabelled, g.splits["test"]).any())
    # node test.index[k] carries tx[k] and ty[k]; node i < len(allx) carries allx[i]
    tx = _reference(directory, "citeseer", "tx").toarray()
    ty = _reference(directory, "citeseer", "ty")
    allx = _reference(directory, "citeseer", "allx").toarray()
    test = g.splits["test"].numpy()
    assert np.array_equal(g.features.numpy()[test], tx)
    assert np.array_equal(g.labels.numpy()[test], ty.argmax(1))
    assert np.array_equal(g.features.numpy()[: allx.shape[0]], allx)


def test_pubmed_missing_allx(shared_datasets):
    directory = shared_datasets / "planetoid_pubmed"
    with pytest.raises(DatasetSourceError) as info:
        load_planetoid(directory)
    assert "ind.pubmed.allx" in str(info.value) and "missing" in str(info.value)
    assert "missing_features='zeros'" in str(info.value)
    g = load_planetoid(directory, missing_features="zeros")
    assert g.num_nodes == 19717 and g.num_edges == 88676
    assert tuple(g.features.shape) == (19717, 500)
    assert _class_counts(g.labels) == [4103, 7739, 7875]
    assert g.description["featureless_nodes"] == 19717 - 60 - 1000
    x = _reference(directory, "pubmed", "x").toarray()
    assert np.array_equal(g.features[:60].numpy(), x)
    assert float(g.features[60:18717].abs().sum()) == 0.0
    assert g.description["featureless_by_split"] == {"train": 0, "val": 500, "test": 0}
    assert g.notes == [
        "18,657 of 19,717 nodes (94.6%) have no features (allx is absent, so --missing-features zeros gave them zero "
        "rows): train 0 of 60, val 500 of 500, test 0 of 1,000; a model sees those nodes only through their "
        "neighbours, so val accuracy says little about the features"
    ]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_prepare_says_how_many_nodes_and_which_splits_have_no_features(shared_datasets, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            f"planetoid:{shared_datasets / 'planetoid_pubmed'}",
            "--name",
            "pubmed",
            "--out",
            str(tmp_path),
            "--missing-features",
            "zeros",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "note: 18,657 of 19,717 nodes (94.6%) have no features" in said
    assert "train 0 of 60, val 500 of 500, test 0 of 1,000" in said
    manifest = json.loads((tmp_path / "pubmed" / "manifest.json").read_text())
    assert manifest["source_description"]["featureless_by_split"] == {"train": 0, "val": 500, "test": 0}
    assert manifest["notes"] and "18,657 of 19,717" in manifest["notes"][0]


@pytest.fixture
def cora_copy(shared_datasets, tmp_path) -> Path:
    target = tmp_path / "cora"
    shutil.copytree(shared_datasets / "planetoid_cora", target)
    for f in target.iterdir():
        f.chmod(0o644)
    return target


def _error(directory: Path, **kwargs) -> str:
    with pytest.raises(DatasetSourceError) as info:
        load_planetoid(directory, **kwargs)
    return str(info.value)


def test_truncated_pickle_names_file(cora_copy):
    path = cora_copy / "ind.cora.tx"
    path.write_bytes(path.read_bytes()[:5000])
    message = _error(cora_copy)
    assert str(path) in message and "not a readable Planetoid pickle" in message


def test_corrupt_pickle_names_file(cora_copy):
    path = cora_copy / "ind.cora.graph"
    path.write_bytes(b"\x80\x02this is not a pickle at all")
    message = _error(cora_copy)
    assert str(path) in message and "not a readable Planetoid pickle" in message


def test_pickle_with_foreign_global_is_refused(cora_copy, tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    path = cora_copy / "ind.cora.y"
    path.write_bytes(pickle.dumps(Evil(), protocol=2))
    message = _error(cora_copy)
    assert str(path) in message and "refusing to load global" in message
    assert not marker.exists()


def test_pickles_of_todays_scipy_load_the_same(cora_copy):
    """Matrices pickled by scipy >= 1.8 name `scipy.sparse._csr` (the shared files name `scipy.sparse.csr`)."""
    before = load_planetoid(cora_copy)
    for part in ("x", "tx", "allx"):
        path = cora_copy / f"ind.cora.{part}"
        matrix = sp.csr_matrix(_reference(cora_copy, "cora", part).toarray())
        path.write_bytes(pickle.dumps(matrix, protocol=4))
        assert b"scipy.sparse._csr" in path.read_bytes()
    after = load_planetoid(cora_copy)
    assert torch.equal(before.features, after.features) and torch.equal(before.labels, after.labels)


@pytest.mark.parametrize(
    "spoil, problem",
    [
        (lambda m: m.indices.__setitem__(7, 5000), "indices must be < 1433"),
        (lambda m: m.indptr.__setitem__(-1, m.indptr[-1] + 10), "Last value of index pointer"),
        (lambda m: m.__dict__.pop("indptr"), "it lacks indptr"),
        (lambda m: m.__dict__.__setitem__("_shape", (1000, -3)), "shape (1000, -3) has a negative dimension"),
    ],
)
def test_inconsistent_sparse_matrix_names_file(cora_copy, spoil, problem):
    path = cora_copy / "ind.cora.tx"
    matrix = _reference(cora_copy, "cora", "tx")
    spoil(matrix)
    path.write_bytes(pickle.dumps(matrix, protocol=4))
    message = _error(cora_copy)
    assert str(path) in message and f"holds an inconsistent sparse matrix ({problem}" in message


def test_wrong_object_type(cora_copy):
    path = cora_copy / "ind.cora.ally"
    path.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    message = _error(cora_copy)
    assert str(path) in message and "expected a 2-D numeric numpy array, found list" in message


def test_missing_file(cora_copy):
    (cora_copy / "ind.cora.ty").unlink()
    message = _error(cora_copy)
    assert str(cora_copy / "ind.cora.ty") in message and "missing Planetoid file (absent: ty)" in message


def test_inconsistent_row_counts(cora_copy):
    index = cora_copy / "ind.cora.test.index"
    index.write_text("\n".join(index.read_text().split()[:-1]) + "\n")
    message = _error(cora_copy)
    assert "ind.cora.ty" in message and "tx 1000, test.index 999" in message


def test_name_inference(tmp_path):
    assert "holds no ind.<name>.graph file" in _error(tmp_path)
    (tmp_path / "ind.a.graph").touch()
    (tmp_path / "ind.b.graph").touch()
    assert "several Planetoid datasets ['a', 'b']" in _error(tmp_path)
    assert "is not a directory" in _error(tmp_path / "ind.a.graph")
