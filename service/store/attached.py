"""`attach_dataset`: zero-copy, read-only views of a dataset another process loaded."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError, SharedMemoryError
from graphtier.service.gather import FeatureTiers, TrafficCounts, tiered_gather
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.shm import attach_tensor
from graphtier.service.storage.row_checksums import RowChecksums
from graphtier.service.store.handle import SharedDatasetHandle, StorageTierRef

if TYPE_CHECKING:
    from graphtier.service.storage import RowReader, StorageReader, StorageReads
    from graphtier.service.storage.direct_reader import StorageMode
    from graphtier.service.store.device_tiers import CudaTiersLease


def _open_storage(ref: StorageTierRef) -> torch.Tensor:
    try:
        array = np.memmap(
            ref.path, mode="r", dtype=np.dtype(ref.dtype), offset=ref.offset_bytes, shape=(ref.rows, *ref.row_shape)
        )
    except (OSError, ValueError) as exc:
        raise SharedMemoryError(f"{ref.path}: cannot map the storage tier ({exc})") from exc
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only mapping, intended
        return torch.from_numpy(array)


@dataclass
class AttachedDataset:
    """A dataset as seen by a producer: graph, labels, splits and its feature tiers."""

    handle: SharedDatasetHandle
    graph: CSCGraph
    labels: torch.Tensor | None
    splits: dict[str, torch.Tensor]
    resident: torch.Tensor | None
    storage: torch.Tensor | None
    link_pairs: dict[str, torch.Tensor] = field(default_factory=dict)  # int64 [n, 2] by array name; see edge_split.py
    _tiers: dict[int, FeatureTiers] = field(default_factory=dict, repr=False)
    _hetero_tiers: dict[str, FeatureTiers] = field(default_factory=dict, repr=False)
    storage_reads: StorageReads = "mmap"  # how the storage rows are read: see graphtier.service.storage
    _leases: dict[int, CudaTiersLease] = field(default_factory=dict, repr=False)
    _reader: StorageReader | None = field(default=None, repr=False)
    _hetero_readers: dict[str, StorageReader] = field(default_factory=dict, repr=False)
    _hetero_checksums: dict[str, RowChecksums | None] = field(default_factory=dict, repr=False)
    checksums: RowChecksums | None = None  # the storage rows' recorded checksums: every read of them is checked
    edge_type: torch.Tensor | None = None  # heterogeneous: int16 [num_edges], the relation of each CSC entry
    hetero_rows: dict[str, tuple[torch.Tensor | None, torch.Tensor | None]] = field(default_factory=dict)
    # heterogeneous: node type -> (resident rows, storage rows) in type-local ids
    staging_bytes: int | None = None  # the storage reader's staging buffer cap; None = the reader's default

    @property
    def is_hetero(self) -> bool:
        return self.handle.hetero is not None

    def hetero_tiers(self, node_type: str) -> FeatureTiers:
        """Node type `node_type`'s tier table over its type-local rows (device tiers accounted)."""
        key = f"type:{node_type}"
        if key not in self._hetero_tiers:
            ref = self.handle.hetero_features.get(node_type)
            if ref is None:
                raise GraphtierError(f"dataset {self.handle.dataset!r} has no feature rows of node type {node_type!r}")
            resident, storage = self.hetero_rows[node_type]
            some = resident if resident is not None else storage
            assert some is not None  # a type with a plan has rows in one place or the other
            empty = some.new_empty((0, *some.shape[1:]))
            plan = ref.plan
            self._hetero_tiers[key] = FeatureTiers(
                replicated_end=plan.replicated_end,
                interleaved_end=plan.interleaved_end,
                host_end=plan.host_end,
                num_rows=plan.num_nodes,
                num_devices=max(plan.num_devices, 1),
                device_index=0,
                resident=resident if resident is not None else empty,
                storage=storage if storage is not None else empty,
                simulated=True,
                storage_reader=self._hetero_storage_reader(node_type, ref.storage),
            )
        return self._hetero_tiers[key]

    def gather_hetero(self, node_type: str, local_ids: torch.Tensor, out: torch.Tensor) -> TrafficCounts:
        """Rows `local_ids` (type-local) of node type `node_type` into out[:len(local_ids)], counted per
        tier; storage rows copied from the mapping are checked against the type's checksums here."""
        tiers = self.hetero_tiers(node_type)
        traffic = tiered_gather(local_ids, tiers, out)
        _verify_mapped_rows(local_ids, tiers, out, traffic, self.hetero_checksums(node_type))
        return traffic

    def hetero_checksums(self, node_type: str) -> RowChecksums | None:
        """Node type `node_type`'s storage rows' recorded checksums (mapped once); None without them."""
        if node_type not in self._hetero_checksums:
            self._hetero_checksums[node_type] = _storage_checksums(self.handle.hetero_features[node_type].storage)
        return self._hetero_checksums[node_type]

    @property
    def has_features(self) -> bool:
        return self.resident is not None or self.storage is not None

    def feature_tiers(self, device_index: int = 0) -> FeatureTiers:
        """The tier table as seen from GPU `device_index` (decides local vs peer interleaved rows)."""
        if device_index not in self._tiers:
            plan = self.handle.plan
            some = self.resident if self.resident is not None else self.storage
            if some is None:
                raise GraphtierError(f"dataset {self.handle.dataset!r} has no node features to gather")
            empty = some.new_empty((0, *some.shape[1:]))
            self._tiers[device_index] = FeatureTiers(
                replicated_end=plan.replicated_end,
                interleaved_end=plan.interleaved_end,
                host_end=plan.host_end,
                num_rows=plan.num_nodes,
                num_devices=max(plan.num_devices, 1),
                device_index=device_index,
                resident=self.resident if self.resident is not None else empty,
                storage=self.storage if self.storage is not None else empty,
                simulated=True,  # the CPU gather reads device rows from their host copy
                storage_reader=self._storage_reader(),
            )
        return self._tiers[device_index]

    def _storage_reader(self) -> StorageReader | None:
        """Per-batch reads of the storage rows in the `direct` (O_DIRECT) and `page-cache` modes;
        None in `mmap` mode, where the gather reads them through the file mapping."""
        ref = self.handle.storage_features
        if self.storage_reads == "mmap" or ref is None or ref.rows == 0:
            return None
        if self._reader is None:
            self._reader = _new_storage_reader(ref, self.storage_reads, self.checksums, self.staging_bytes)
        return self._reader

    def _hetero_storage_reader(self, node_type: str, ref: StorageTierRef | None) -> StorageReader | None:
        """Per-batch reads of node type `node_type`'s storage rows (`ref`) in the `direct` and
        `page-cache` modes, checked against the type's recorded checksums; None in `mmap` mode."""
        if self.storage_reads == "mmap" or ref is None or ref.rows == 0:
            return None
        if node_type not in self._hetero_readers:
            self._hetero_readers[node_type] = _new_storage_reader(
                ref, self.storage_reads, self.hetero_checksums(node_type), self.staging_bytes
            )
        return self._hetero_readers[node_type]

    def hetero_row_reader(self, node_type: str) -> RowReader | None:
        """What reads node type `node_type`'s storage rows outside the gather (its look-ahead window):
        its storage reader, or its mapping in `mmap` mode; None without storage rows of the type."""
        ref = self.handle.hetero_features[node_type].storage
        _, storage = self.hetero_rows[node_type]
        if ref is None or storage is None or storage.shape[0] == 0:
            return None
        if self.storage_reads == "mmap":
            from graphtier.service.storage import MappedReader

            return MappedReader(storage, self.hetero_checksums(node_type))
        return self._hetero_storage_reader(node_type, ref)

    def row_reader(self) -> RowReader | None:
        """What reads storage rows outside the gather (the look-ahead window): the storage reader of
        this mode, or the mapping in `mmap` mode; None without storage rows."""
        if self.storage is None or self.storage.shape[0] == 0:
            return None
        if self.storage_reads == "mmap":
            from graphtier.service.storage import MappedReader

            return MappedReader(self.storage, self.checksums)
        return self._storage_reader()

    def gather(self, ids: torch.Tensor, out: torch.Tensor, *, device_index: int = 0) -> TrafficCounts:
        """Rows `ids` into out[:len(ids)]; storage rows copied from the mapping are checked against their
        checksums here (a storage reader checks its own)."""
        tiers = self.feature_tiers(device_index)
        traffic = tiered_gather(ids, tiers, out)
        _verify_mapped_rows(ids, tiers, out, traffic, self.checksums)
        return traffic

    def cuda_tiers(self, device: int) -> CudaTiersLease:
        """The tiers as GPU `device` of this process reads them: its device tier mappings
        (opened once per device) and the host tier registered in place. Released by `detach()`."""
        if device not in self._leases:
            from graphtier.service.store.device_tiers import open_cuda_tiers  # CUDA only when asked for

            self._leases[device] = open_cuda_tiers(
                self.handle.plan,
                self.handle.device_tiers,
                self.resident,
                self.storage,
                device,
                label=self.handle.dataset,
                resident_ref=self.handle.resident_features,
                fd_socket=self.handle.fd_socket,
            )
        return self._leases[device]

    def cuda_structure(self, device: int) -> CSCGraph:
        """The CSC structure as zero-copy CUDA views of this process's registered mapping."""
        lease = self.cuda_tiers(device)
        if lease.structure is None:  # registered once per lease; the views go with it on detach()
            lease.structure = (
                lease.register_view(self.graph.colptr, f"{self.handle.dataset} colptr", self.handle.colptr),
                lease.register_view(self.graph.row, f"{self.handle.dataset} row", self.handle.row),
            )
        return CSCGraph(colptr=lease.structure[0], row=lease.structure[1])

    def detach(self) -> None:
        """Close every device mapping and host registration this process made for the dataset."""
        leases, self._leases = self._leases, {}
        for lease in leases.values():
            lease.close()
        if self._reader is not None:
            self._reader.close()
            self._reader, self._tiers = None, {}
        readers, self._hetero_readers = self._hetero_readers, {}
        for reader in readers.values():
            reader.close()
        if readers:
            self._hetero_tiers = {}


def _verify_mapped_rows(
    ids: torch.Tensor, tiers: FeatureTiers, out: torch.Tensor, traffic: TrafficCounts, checksums: RowChecksums | None
) -> None:
    """Check the storage rows a gather copied out of the mapping (no storage reader, which checks its
    own) against their recorded checksums; PreparedDatasetError naming the file and the first bad row."""
    if checksums is None or tiers.storage_reader is not None or not traffic.storage.rows:
        return
    ids = ids.to(torch.int64)
    pos = (ids >= tiers.host_end).nonzero().squeeze(1)
    rows = out[: ids.numel()].index_select(0, pos)
    checksums.verify((ids[pos] - tiers.host_end).numpy(), rows.reshape(rows.shape[0], -1).numpy())


def _new_storage_reader(
    ref: StorageTierRef, mode: StorageMode, checksums: RowChecksums | None, staging_bytes: int | None
) -> StorageReader:
    """A reader of the storage rows `ref` names, whole, in `mode` (direct or page-cache), its staging
    buffer capped at `staging_bytes` (None: the reader's default)."""
    from graphtier.service.storage import StorageReader

    row_bytes = int(np.prod(ref.row_shape, dtype=np.int64)) * np.dtype(ref.dtype).itemsize
    reader = partial(
        StorageReader,
        Path(ref.path),
        data_offset=ref.offset_bytes,
        row_bytes=row_bytes,
        first_row=0,
        num_rows=ref.rows,
        mode=mode,
        checksums=checksums,
    )
    return reader() if staging_bytes is None else reader(staging_bytes=staging_bytes)


def attach_dataset(
    handle: SharedDatasetHandle, *, storage_reads: StorageReads = "mmap", staging_bytes: int | None = None
) -> AttachedDataset:
    """Map every segment of `handle` read-only; fails with a clear error when the owner is gone.
    `storage_reads` picks how the storage rows are read (mmap, direct or page-cache), `staging_bytes`
    caps the storage reader's staging buffer."""
    from graphtier.service.storage import STORAGE_READS

    if storage_reads not in STORAGE_READS:
        raise GraphtierError(f"storage reads {storage_reads!r}: expected one of {', '.join(STORAGE_READS)}")
    return AttachedDataset(
        handle=handle,
        graph=CSCGraph(colptr=attach_tensor(handle.colptr), row=attach_tensor(handle.row)),
        labels=attach_tensor(handle.labels) if handle.labels else None,
        splits={name: attach_tensor(ref) for name, ref in handle.splits.items()},
        link_pairs={name: attach_tensor(ref) for name, ref in handle.link_pairs.items()},
        resident=attach_tensor(handle.resident_features) if handle.resident_features else None,
        storage=_open_storage(handle.storage_features) if handle.storage_features else None,
        storage_reads=storage_reads,
        checksums=_storage_checksums(handle.storage_features),
        edge_type=attach_tensor(handle.edge_type) if handle.edge_type else None,
        hetero_rows={
            name: (
                attach_tensor(ref.resident) if ref.resident else None,
                _open_storage(ref.storage) if ref.storage else None,
            )
            for name, ref in handle.hetero_features.items()
        },
        staging_bytes=staging_bytes,
    )


def _storage_checksums(ref: StorageTierRef | None) -> RowChecksums | None:
    """The storage rows' recorded checksums, from their segment; None without storage rows or checksums."""
    if ref is None or ref.rows == 0 or ref.row_checksums is None:
        return None
    row_bytes = int(np.prod(ref.row_shape, dtype=np.int64)) * np.dtype(ref.dtype).itemsize
    return RowChecksums(
        attach_tensor(ref.row_checksums).numpy()[ref.first_row :],
        path=ref.path,
        first_row=ref.first_row,
        offset_bytes=ref.offset_bytes,
        row_bytes=row_bytes,
    )
