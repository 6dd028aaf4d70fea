"""`load_source`: scheme dispatch, option checking, missing paths, and the split it applies."""

from __future__ import annotations

import inspect

import pytest

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.sources import SOURCE_SCHEMES, load_source, reader_options
from graphtier.service.sources.registry import SYNTHETIC_OPTIONS


def _error(spec: str, **options) -> str:
    with pytest.raises(DatasetSourceError) as info:
        load_source(spec, **options)
    return str(info.value)


def test_unknown_scheme_lists_valid_ones():
    message = _error("parquet:/data/g.parquet")
    assert "unknown dataset scheme 'parquet'" in message
    assert all(scheme in message for scheme in SOURCE_SCHEMES)
    assert "is not scheme:target" in _error("cora")
    assert "unknown synthetic generator 'er' (valid: rmat)" in _error("synthetic:er")


def test_missing_path(tmp_path):
    path = tmp_path / "absent"
    assert f"{path}: does not exist" in _error(f"planetoid:{path}")


def test_option_the_reader_does_not_take(shared_datasets):
    message = _error(f"npz:{shared_datasets / 'gnn_benchmark_npz' / 'cora.npz'}", one_based=True)
    assert "option(s) one_based not accepted by npz: sources" in message
    assert "valid options: num_classes, train_fraction, val_fraction, test_fraction, split_seed" in message
    assert "one_based" in reader_options("edges") and "missing_features" in reader_options("planetoid")


def test_edge_list_gets_a_recorded_random_split(write):
    path = write("g.txt", "".join(f"{i} {(i + 1) % 40}\n" for i in range(40)))
    g = load_source(f"edges:{path}", train_fraction=0.5, val_fraction=0.25, test_fraction=0.25, split_seed=7)
    assert {k: v.numel() for k, v in g.splits.items()} == {"train": 20, "val": 10, "test": 10}
    assert g.description["split"]["seed"] == 7


def test_planetoid_keeps_its_standard_split(shared_datasets):
    g = load_source(f"planetoid:{shared_datasets / 'planetoid_cora'}", name="cora")
    assert g.splits["train"].numel() == 140 and g.description["split"]["rule"].startswith("planetoid standard")


def test_synthetic_options_match_the_generator():
    from graphtier.service.sources.synthetic import generate_rmat

    assert set(SYNTHETIC_OPTIONS) == set(inspect.signature(generate_rmat).parameters)
    g = load_source("synthetic:rmat", scale=8, feature_dim=4, split_seed=1)
    assert g.num_nodes == 256 and g.splits["train"].numel() > 0
    assert "split_seed" in reader_options("synthetic")
    assert "option(s) undirected not accepted by synthetic: sources" in _error("synthetic:rmat", undirected=True)
