"""Prepared datasets: the versioned on-disk layout, its atomic writer, reader and pipeline.

The names below load on first use: `graphtier dataset list` reads manifests (pydantic) and
must not pay for torch and numpy, which the reader, the writers and the pipeline import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphtier.service.prepared.catalog import list_datasets, remove_dataset
    from graphtier.service.prepared.dataset import PreparedDataset
    from graphtier.service.prepared.manifest import FORMAT_VERSION, DatasetManifest
    from graphtier.service.prepared.prepare import PrepareConfig, prepare_dataset

__all__ = [
    "FORMAT_VERSION",
    "DatasetManifest",
    "PrepareConfig",
    "PreparedDataset",
    "list_datasets",
    "prepare_dataset",
    "remove_dataset",
]


def __getattr__(name: str) -> Any:
    """Each exported name from its module, imported when first asked for."""
    if name in ("list_datasets", "remove_dataset"):
        from graphtier.service.prepared import catalog as module
    elif name == "PreparedDataset":
        from graphtier.service.prepared import dataset as module
    elif name in ("FORMAT_VERSION", "DatasetManifest"):
        from graphtier.service.prepared import manifest as module
    elif name in ("PrepareConfig", "prepare_dataset"):
        from graphtier.service.prepared import prepare as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
