"""One copy of a prepared dataset in shared memory, placed in tiers by a `PlacementPlan`.

The owner (`SharedDatasetStore`, later the daemon) copies structure, labels, splits and
the resident feature rows into POSIX shm segments and leaves the storage tier in the
memory-mapped dataset file; any process attaches from the serialisable
`SharedDatasetHandle` without copying a byte.
"""

from graphtier.service.store.attached import AttachedDataset, attach_dataset
from graphtier.service.store.handle import SharedDatasetHandle, StorageTierRef
from graphtier.service.store.shared_store import SharedDatasetStore

__all__ = ["AttachedDataset", "SharedDatasetHandle", "SharedDatasetStore", "StorageTierRef", "attach_dataset"]
