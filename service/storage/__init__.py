"""The storage tier: feature rows past the host tier, read from the dataset's file per mini-batch."""

from graphtier.service.storage.direct_reader import STORAGE_MODES, ReaderStats, StorageReader, plan_reads

__all__ = ["STORAGE_MODES", "ReaderStats", "StorageReader", "plan_reads"]
