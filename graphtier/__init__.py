"""graphtier: a training data service for GNNs.

This package names the distribution, its version and the user API's stable paths; the code lives
in its subpackages (`graphtier.service`, `graphtier.launcher`, `graphtier.contract`, `graphtier.v1`),
which `setup.py` maps onto the repository's top-level folders. The user API re-exports them:
`graphtier.loader` (a training script's job: `connect`, `Job`, `Batch`, `Block`),
`graphtier.pyg` (PyG's loaders on graphtier's stores and sampler), `graphtier.dgl` (DGL blocks) and
`graphtier.nn` (layers for a script's own model).
Importing this package imports none of the others: `graphtier.connect` is
`graphtier.loader.connect`, imported on first use, and `__version__` is read from the installed
metadata when first asked for (every `graphtier` command imports this package, and reading the
metadata scans the environment's distributions).
"""

from __future__ import annotations

from typing import Any

__all__ = ["__version__", "connect"]


def __getattr__(name: str) -> Any:
    """`__version__` and `connect`, loaded when first asked for."""
    if name == "connect":
        from graphtier.loader import connect

        return connect
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("graphtier")
        except PackageNotFoundError:  # a source tree on sys.path without an install: no metadata to read
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
