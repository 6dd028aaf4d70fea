"""Fixtures for the typed-graph tests: a tiny typed graph in OGB's layout (ACM: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typed_graphs import write_typed_ogb


@pytest.fixture
def typed_root(tmp_path) -> Path:
    return write_typed_ogb(tmp_path / "typed")
