"""The storage tier: feature rows past the host tier, read from the dataset's file per mini-batch
(O_DIRECT, page cache or the mapping), optionally ahead of time through the look-ahead window."""

from graphtier.contract.storage import MAX_WINDOW, STORAGE_READS, StorageCounters, StorageReads
from graphtier.service.storage.direct_reader import STORAGE_MODES, ReaderStats, StorageReader
from graphtier.service.storage.mapped_reader import MappedReader
from graphtier.service.storage.read_plan import plan_reads
from graphtier.service.storage.window import LookaheadWindow, RowReader, Ticket

__all__ = [
    "MAX_WINDOW",
    "STORAGE_MODES",
    "STORAGE_READS",
    "LookaheadWindow",
    "MappedReader",
    "ReaderStats",
    "RowReader",
    "StorageCounters",
    "StorageReader",
    "StorageReads",
    "Ticket",
    "plan_reads",
]
