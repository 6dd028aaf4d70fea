"""Prepared datasets: the versioned on-disk layout, its atomic writer, reader and pipeline."""

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
