"""Fixtures for the typed-graph tests: a tiny typed graph in OGB's layout, and ACM prepared once."""

from __future__ import annotations

from pathlib import Path

import pytest
from typed_graphs import write_typed_ogb


@pytest.fixture
def typed_root(tmp_path) -> Path:
    return write_typed_ogb(tmp_path / "typed")


@pytest.fixture(scope="session")
def prepared_acm(shared_datasets, prepared_root):
    """ACM (split heco20) prepared with wrpr and reverse relations, shared by read-only tests."""
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

    source = shared_datasets / "ogb_hetero_acm"
    if not source.is_dir():
        pytest.skip(f"{source} not found")
    prepare_dataset(PrepareConfig(source=f"ogb:{source}", name="acm", root=prepared_root))
    return PreparedDataset(prepared_root / "acm")
