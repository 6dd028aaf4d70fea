"""Typed-graph test fixtures: one intra-op thread, a tiny typed graph in OGB's layout, ACM prepared once."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typed_graphs import write_typed_ogb


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: the typed models and batches are small, and several threads on a shared
    2-core machine spend their time waiting on each other (HGT's 40 tiny epochs: 43 s with the
    default threads, 1 s with one, at a load average of 20)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


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
