"""graphtier: a training data service for GNNs.

This package only names the distribution and its version; the code lives in its subpackages
(`graphtier.service`, `graphtier.launcher`, `graphtier.contract`, `graphtier.v1`), which
`setup.py` maps onto the repository's top-level folders. Importing it imports none of them,
and `__version__` is read from the installed metadata when first asked for: every `graphtier`
command imports this package, and reading the metadata scans the environment's distributions.
"""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("graphtier")
    except PackageNotFoundError:  # a source tree on sys.path without an install: no metadata to read
        found = "0+unknown"
    globals()["__version__"] = found
    return found
