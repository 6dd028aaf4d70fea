"""Feature files for the storage reader's tests, and whether their filesystem takes O_DIRECT."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def write_features(
    tmp_path: Path, rows: int, dim: int, *, seed: int = 0, name: str = "features.npy"
) -> tuple[Path, np.ndarray]:
    """A float32 `.npy` of `rows` x `dim` normal values (np.save: a 128 B header), and the values."""
    values = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    path = tmp_path / name
    np.save(path, values)
    return path, values


def direct_supported(path: Path) -> bool:
    """Whether `path`'s filesystem opens files with O_DIRECT (tmpfs before Linux 6.6 does not)."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False
