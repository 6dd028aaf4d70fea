"""The error types graphtier raises for bad input, each naming what is wrong and where.

Every message says the cause, and where it helps the fix; the CLI turns these into a
one-line message and a non-zero exit instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path


class GraphtierError(Exception):
    """Base class of every error graphtier reports to a user."""


class DatasetSourceError(GraphtierError):
    """A raw dataset file is missing, malformed or inconsistent with its siblings."""

    def __init__(self, path: str | Path | None, problem: str, *, fix: str | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.fix = fix
        where = f"{self.path}: " if self.path else ""
        tail = f" ({fix})" if fix else ""
        super().__init__(f"{where}{problem}{tail}")


class PreparedDatasetError(GraphtierError):
    """A prepared dataset is missing, already exists, or fails its checksums."""


class PlacementError(GraphtierError):
    """Tier budgets that cannot be turned into a placement for this dataset."""


class SamplingError(GraphtierError):
    """Seeds or fanouts a sampler cannot work with."""


class SharedMemoryError(GraphtierError):
    """A shared-memory segment cannot be created, attached or reclaimed."""
