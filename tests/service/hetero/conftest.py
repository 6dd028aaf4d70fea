"""Heterogeneous-graph test fixtures: one intra-op thread, a tiny graph in OGB's layout (ACM: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hetero_graphs import write_hetero_ogb


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: the heterogeneous models and batches are small, and several threads on a shared
    2-core machine spend their time waiting on each other (HGT's 40 tiny epochs: 43 s with the
    default threads, 1 s with one, at a load average of 20)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def hetero_root(tmp_path) -> Path:
    return write_hetero_ogb(tmp_path / "heterogeneous")
