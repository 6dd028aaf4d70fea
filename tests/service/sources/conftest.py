"""Fixtures for the source-reader tests (the shared datasets come from tests/conftest.py)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest


@pytest.fixture
def write(tmp_path: Path):
    """write(name, text, gz=False) -> path of a file holding `text` (gzipped when asked)."""

    def _write(name: str, text: str | bytes, gz: bool = False) -> Path:
        data = text.encode() if isinstance(text, str) else text
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(data) if gz else data)
        return path

    return _write
