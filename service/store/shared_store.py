"""`SharedDatasetStore`: loads a prepared dataset into shm segments it owns, and its device
tiers into GPU memory it owns when it is given GPUs."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.graph.validate import check_structure
from graphtier.service.memory import DeviceMemoryMode, FdExporter
from graphtier.service.placement import PlacementPlan
from graphtier.service.prepared.dataset import PreparedDataset
from graphtier.service.prepared.edge_split import LINK_ARRAY_PREFIX
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.shm import SegmentOwner, SegmentRef, SharedSegment
from graphtier.service.storage.row_checksums import checksum_array_for
from graphtier.service.store.handle import HeteroFeatureRef, SharedDatasetHandle, StorageTierRef
from graphtier.service.store.verified_copy import copy_array

if TYPE_CHECKING:
    from graphtier.service.store.device_tiers import DeviceTierSet


class SharedDatasetStore:
    """The one process-wide copy of a dataset; closing it unlinks every segment it made."""

    def __init__(
        self,
        dataset: PreparedDataset,
        plan: PlacementPlan,
        *,
        hetero_plans: dict[str, PlacementPlan] | None = None,
        owner: SegmentOwner | None = None,
        devices: Sequence[int] = (),
        placement_notes: Sequence[str] = (),
        verify: bool = True,
        device_memory: DeviceMemoryMode = "ipc",
        fd_exporter: FdExporter | None = None,
    ) -> None:
        """`hetero_plans`: a heterogeneous dataset's plan per featured node type (over its type-local rows);
        their device tiers are accounted, not placed on GPUs. `devices`: the CUDA ordinals
        (plan.num_devices of them) whose memory holds the device tiers; empty = the device tiers
        stay in host memory, accounted only. `verify`: check every array it serves against the
        manifest's BLAKE3 (else sha256) while copying (PreparedDatasetError).
        `device_memory`: how the device tiers are shared (ipc handles, or vmm fds). `fd_exporter`:
        the owner's fd socket; given, it passes the read-write fds of this store's segments (for GPUs
        that cannot register read-only host memory) and the fds of vmm device tiers. A store given
        `devices` and no exporter serves its own (on a socket in a private temporary directory, closed
        with the store), so its consumers can always fall back to a writable registration."""
        if plan.num_nodes != dataset.manifest.num_nodes:
            from graphtier.contract.errors import PlacementError

            raise PlacementError(
                f"plan is for {plan.num_nodes} nodes but dataset {dataset.name!r} has {dataset.manifest.num_nodes}"
            )
        self.dataset = dataset
        self.plan = plan
        self.hetero_plans = hetero_plans
        if (dataset.manifest.hetero is None) != (hetero_plans is None):
            from graphtier.contract.errors import PlacementError

            raise PlacementError(
                f"dataset {dataset.name!r}: per-type plans are for heterogeneous datasets, which need them"
            )
        self._own_owner = owner is None
        self.owner = owner or SegmentOwner()
        self.devices = tuple(devices)
        self.placement_notes = tuple(placement_notes)
        self.device_tiers: DeviceTierSet | None = None
        self._copies: dict[str, torch.Tensor] = {}
        self.verify = verify
        self.verify_seconds = 0.0
        self.device_memory = device_memory
        self.fd_exporter = fd_exporter
        self._exported: list[str] = []
        self._own_exporter_dir: str | None = None
        try:
            if self.fd_exporter is None and self.devices:
                self._own_exporter_dir = tempfile.mkdtemp(prefix="graphtier-fds-")
                self.fd_exporter = FdExporter(os.path.join(self._own_exporter_dir, "memory.sock"))
            self.handle = self._load()
            for segment in self.owner.segments.values():
                self._export_read_write(segment)
                segment.seal()  # filled: from now on nobody writes the tiers, the owner included
        except BaseException:
            self.close()
            raise
        finally:
            dataset.release()  # everything needed now lives in the segments or the storage-tier file

    def _export_read_write(self, segment: SharedSegment) -> None:
        """Hand the exporter a read-write fd of `segment` while it can still be opened so (before `seal`)."""
        if self.fd_exporter is None:
            return
        fd = os.open(segment.path, os.O_RDWR)
        try:
            self.fd_exporter.add(segment.name, fd)
        finally:
            os.close(fd)
        self._exported.append(segment.name)

    def _copy(self, label: str, source: torch.Tensor, key: str | None = None) -> SegmentRef:
        """Copy `source` (a prefix of rows of array `key`, when given: then straight from the array's
        file, by the kernel) into a new segment; with `verify`, the array's whole file is checked
        against the manifest while copying."""
        # Segment labels allow [A-Za-z0-9_-] only; dataset names may also hold '.' and be longer.
        prefix = re.sub(r"[^A-Za-z0-9_-]", "_", self.dataset.name)[:40]
        segment, tensor = self.owner.create_tensor(f"{prefix}-{label}", tuple(source.shape), source.dtype)
        if key is not None:
            self._copy_file(key, tensor, (segment.path, segment.ref_for(tensor).offset) if tensor.numel() else None)
        else:
            tensor.copy_(source)
        self._copies[label] = tensor
        return segment.ref_for(tensor)

    def _copy_file(self, key: str, tensor: torch.Tensor, place: tuple[str, int] | None) -> None:
        """`copy_array` of array `key` into `tensor` at `place` (None: `tensor` is empty, the file is
        only checked); with `verify`, checked against the manifest, a feature array's mismatch
        naming its first changed row by its recorded row checksums."""
        ds = self.dataset
        if not self.verify:
            copy_array(ds.array_path(key), key, tensor, place, None)
            return
        t0 = time.perf_counter()
        checksums = checksum_array_for(key)
        rows_file = ds.array_path(checksums) if checksums is not None and ds.has(checksums) else None
        copy_array(ds.array_path(key), key, tensor, place, ds.manifest.arrays[key], rows_file)
        self.verify_seconds += time.perf_counter() - t0

    def _load(self) -> SharedDatasetHandle:
        ds, plan = self.dataset, self.plan
        labels = self._copy("labels", ds.labels, "labels") if ds.labels is not None else None
        splits = {name: self._copy(f"{name}-ids", ds.split(name), f"{name}_ids") for name in ("train", "val", "test")}
        link_pairs = {
            key: self._copy(key.replace("_", "-"), ds.array(key), key)
            for key in ds.manifest.arrays
            if key.startswith(LINK_ARRAY_PREFIX)
        }
        resident = storage = None
        features = ds.features
        if features is not None:
            if plan.host_end > 0:
                resident = self._copy("features", features[: plan.host_end], "features")
            if plan.host_end < plan.num_nodes:
                storage = self._storage_tier("feature-checksums", "features", features, plan)
        device_refs: tuple = ()
        if self.devices and resident is not None and plan.interleaved_end > 0:
            from graphtier.service.store.device_tiers import DeviceTierSet  # CUDA only when asked for

            rows = self._copies["features"]
            self.device_tiers = DeviceTierSet(
                plan, rows, self.devices, self.dataset.name, mode=self.device_memory, exporter=self.fd_exporter
            )
            device_refs = tuple(self.device_tiers.refs)
        edge_type = self._copy("edge-type", ds.array("edge_type"), "edge_type") if ds.has("edge_type") else None
        hetero = {
            name: self._hetero_rows(index, name, hetero_plan)
            for index, (name, hetero_plan) in enumerate((self.hetero_plans or {}).items())
        }
        colptr, row = self._copy("colptr", ds.array("colptr"), "colptr"), self._copy("row", ds.array("row"), "row")
        check_structure(self._copies["colptr"], self._copies["row"], plan.num_nodes, dataset=ds.name)  # as served
        if self.verify and features is not None and resident is None:  # every row is on storage: check the file
            self._copy_file("features", features.new_empty((0, *features.shape[1:])), None)
        self._copies.clear()  # the segments keep the data; the store keeps no views
        return SharedDatasetHandle(
            dataset=ds.name,
            plan=plan,
            colptr=colptr,
            row=row,
            labels=labels,
            splits=splits,
            link_pairs=link_pairs,
            resident_features=resident,
            storage_features=storage,
            device_tiers=device_refs,
            placement_notes=self.placement_notes,
            fd_socket=self.fd_exporter.path if self.fd_exporter is not None else None,
            class_labels=tuple(ds.manifest.class_labels) if ds.manifest.class_labels is not None else None,
            hetero=ds.manifest.hetero,
            edge_type=edge_type,
            hetero_features=hetero,
        )

    def _hetero_rows(self, index: int, name: str, plan: PlacementPlan) -> HeteroFeatureRef:
        """Node type `name`'s rows [0, plan.host_end) copied into a segment, the rest left in its file."""
        ds = self.dataset
        assert ds.manifest.hetero is not None
        key = ds.manifest.hetero.type_named(name).feature_array
        if key is None:
            raise PreparedDatasetError(f"dataset {ds.name!r}: node type {name!r} has a plan but no feature array")
        rows = ds.array(key)
        resident = self._copy(f"type{index}-rows", rows[: plan.host_end], key) if plan.host_end > 0 else None
        storage = None
        if plan.host_end < plan.num_nodes:
            storage = self._storage_tier(f"type{index}-checksums", key, rows, plan)
            if self.verify and resident is None:  # every row is on storage: check the file
                self._copy_file(key, rows.new_empty((0, *rows.shape[1:])), None)
        return HeteroFeatureRef(plan=plan, resident=resident, storage=storage)

    def _storage_tier(self, label: str, key: str, rows: torch.Tensor, plan: PlacementPlan) -> StorageTierRef:
        """Rows [plan.host_end, plan.num_nodes) of feature array `key` (`rows`), left in its file, with
        their recorded per-row checksums copied into a segment (`label`) where prepare wrote them."""
        ds = self.dataset
        path = ds.array_path(key)
        checksum_array = checksum_array_for(key)
        checksums = (
            self._copy(label, ds.array(checksum_array), checksum_array)
            if checksum_array is not None and ds.has(checksum_array)
            else None
        )
        return StorageTierRef(
            path=str(path),
            offset_bytes=npy_data_offset(path) + plan.host_end * plan.row_bytes,
            first_row=plan.host_end,
            rows=plan.num_nodes - plan.host_end,
            row_shape=tuple(rows.shape[1:]),
            dtype=str(rows.numpy().dtype),
            row_checksums=checksums,
        )

    @property
    def simulated_devices(self) -> bool:
        """True when the device tiers are accounted in host memory, not placed on GPUs."""
        return not self.devices

    def close(self) -> None:
        exported, self._exported = self._exported, []
        for name in exported:
            if self.fd_exporter is not None:
                self.fd_exporter.remove(name)
        if self.device_tiers is not None:
            self.device_tiers.close()
            self.device_tiers = None
        if self._own_exporter_dir is not None:
            assert self.fd_exporter is not None
            self.fd_exporter.close()
            shutil.rmtree(self._own_exporter_dir, ignore_errors=True)
            self.fd_exporter, self._own_exporter_dir = None, None
        if self._own_owner:
            self.owner.close()

    def __enter__(self) -> SharedDatasetStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
