"""graphtier: a training data service for GNNs.

This package only names the distribution and its version; the code lives in its subpackages
(`graphtier.service`, `graphtier.launcher`, `graphtier.contract`, `graphtier.v1`), which
`setup.py` maps onto the repository's top-level folders. Importing it imports none of them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("graphtier")
except PackageNotFoundError:  # a source tree on sys.path without an install: no metadata to read
    __version__ = "0+unknown"

__all__ = ["__version__"]
