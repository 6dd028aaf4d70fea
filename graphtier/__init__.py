"""graphtier: a training data service for GNNs.

This package names the distribution, its version and the user API's stable paths; the code lives
in its subpackages (`graphtier.service`, `graphtier.launcher`, `graphtier.contract`, `graphtier.v1`),
which `setup.py` maps onto the repository's top-level folders. The user API re-exports them:
`graphtier.loader` (a training script's job: `connect`, `Job`, `DeviceBatch`, `Block`),
`graphtier.pyg` (PyG's loaders on graphtier's stores and sampler) and `graphtier.dgl` (DGL blocks).
`graphtier.connect` is `graphtier.loader.connect`, imported on first use: importing this package
imports none of the others.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

try:
    __version__: str = version("graphtier")
except PackageNotFoundError:  # a source tree on sys.path without an install: no metadata to read
    __version__ = "0+unknown"

__all__ = ["__version__", "connect"]


def __getattr__(name: str) -> Any:
    """`graphtier.connect`, loaded when first asked for (torch and the runtime are heavy imports)."""
    if name == "connect":
        from graphtier.loader import connect

        return connect
    raise AttributeError(f"module 'graphtier' has no attribute {name!r}")
