"""Prepared datasets: the versioned on-disk layout, its atomic writer, reader and pipeline.

The names below load on first use: `graphtier dataset list` reads manifests (pydantic) and
must not pay for torch and numpy, which the reader, the writers and the pipeline import.
"""

from __future__ import annotations

import importlib
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

_HOMES = {  # each exported name's module
    "list_datasets": "catalog",
    "remove_dataset": "catalog",
    "PreparedDataset": "dataset",
    "FORMAT_VERSION": "manifest",
    "DatasetManifest": "manifest",
    "PrepareConfig": "prepare",
    "prepare_dataset": "prepare",
}


def __getattr__(name: str) -> Any:
    """Each exported name from its module, imported when first asked for."""
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
