"""The wire form of a loaded dataset's layout: `SharedDatasetHandle` and its parts as `graphtier.v1` messages.

`DatasetLayoutInfo` (GetDatasetLayout, LoadDataset) carries the handle a process attaches
to: shared-memory segment refs, the storage tier's file, the device tiers' IPC handles and
the placement plan. The daemon converts it to a message, a trainer rank back; both import
it from here, beside the handle it carries. It needs torch (the handle's types do), so a
client that only submits jobs and reads status never imports it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.conversions import (
    budgets_from_proto,
    budgets_to_proto,
    from_timestamp,
    tier_from_proto,
    tier_to_proto,
    timestamp,
)
from graphtier.contract.datasets import BudgetSpec, TierBytes
from graphtier.contract.hetero import HeteroSchema
from graphtier.service.memory.wire import handle_from_proto, handle_to_proto
from graphtier.service.placement import PlacementPlan
from graphtier.service.shm import SegmentRef
from graphtier.service.store.handle import HeteroFeatureRef, SharedDatasetHandle, StorageTierRef
from graphtier.service.store.tier_ref import DeviceTierRef
from graphtier.v1 import common_pb2, datasets_pb2

# Datasets


class DatasetLayoutInfo(BaseModel):
    """Where every part of a loaded dataset lives (the handle) plus the sizes reports need."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    handle: SharedDatasetHandle
    tier_sizes: list[TierBytes] = Field(description="Hottest tier first, then structure_device.")
    num_edges: int
    feature_dim: int
    num_classes: int
    feature_bytes: int
    structure_bytes: int
    device_bytes_per_device: int
    simulated_devices: bool
    owner_pid: int
    loaded_at: datetime
    budgets: BudgetSpec
    version: str = Field("", description="the prepared dataset's content version (sha256) this copy was loaded from")

    @property
    def dataset(self) -> str:
        return self.handle.dataset


class LoadResult(BaseModel):
    """What LoadDataset returns: the layout, and whether the dataset was loaded before."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    layout: DatasetLayoutInfo
    already_loaded: bool


# Segments, storage, boundaries


def segment_ref_to_proto(ref: SegmentRef) -> common_pb2.SegmentRef:
    return common_pb2.SegmentRef(name=ref.name, offset=ref.offset, shape=list(ref.shape), dtype=ref.dtype)


def segment_ref_from_proto(message: common_pb2.SegmentRef) -> SegmentRef:
    return SegmentRef(name=message.name, offset=message.offset, shape=tuple(message.shape), dtype=message.dtype)


def storage_ref_to_proto(ref: StorageTierRef) -> common_pb2.StorageTierRef:
    message = common_pb2.StorageTierRef(
        path=ref.path,
        offset_bytes=ref.offset_bytes,
        first_row=ref.first_row,
        rows=ref.rows,
        row_shape=list(ref.row_shape),
        dtype=ref.dtype,
    )
    if ref.row_checksums is not None:
        message.row_checksums.CopyFrom(segment_ref_to_proto(ref.row_checksums))
    return message


def storage_ref_from_proto(message: common_pb2.StorageTierRef) -> StorageTierRef:
    return StorageTierRef(
        path=message.path,
        offset_bytes=message.offset_bytes,
        first_row=message.first_row,
        rows=message.rows,
        row_shape=tuple(message.row_shape),
        dtype=message.dtype,
        row_checksums=segment_ref_from_proto(message.row_checksums) if message.HasField("row_checksums") else None,
    )


def plan_to_proto(plan: PlacementPlan) -> common_pb2.PlacementBoundaries:
    return common_pb2.PlacementBoundaries(**plan.model_dump())


def plan_from_proto(message: common_pb2.PlacementBoundaries) -> PlacementPlan:
    return PlacementPlan(**{name: getattr(message, name) for name in PlacementPlan.model_fields})


def layout_to_proto(layout: DatasetLayoutInfo) -> datasets_pb2.DatasetLayout:
    handle = layout.handle
    message = datasets_pb2.DatasetLayout(
        dataset=handle.dataset,
        boundaries=plan_to_proto(handle.plan),
        colptr=segment_ref_to_proto(handle.colptr),
        row=segment_ref_to_proto(handle.row),
        splits={name: segment_ref_to_proto(ref) for name, ref in handle.splits.items()},
        link_pairs={name: segment_ref_to_proto(ref) for name, ref in handle.link_pairs.items()},
        tier_sizes=[
            common_pb2.TierSize(tier=tier_to_proto(t.tier), rows=t.rows, bytes=t.bytes) for t in layout.tier_sizes
        ],
        num_edges=layout.num_edges,
        feature_dim=layout.feature_dim,
        num_classes=layout.num_classes,
        feature_bytes=layout.feature_bytes,
        structure_bytes=layout.structure_bytes,
        device_bytes_per_device=layout.device_bytes_per_device,
        simulated_devices=layout.simulated_devices,
        owner_pid=layout.owner_pid,
        loaded_at=timestamp(layout.loaded_at),
        budgets=budgets_to_proto(layout.budgets),
        version=layout.version,
    )
    message.device_tiers.extend(
        common_pb2.DeviceTierRef(tier=ref.tier, slot=ref.slot, rows=ref.rows, memory=handle_to_proto(ref.memory))
        for ref in handle.device_tiers
    )
    if handle.fd_socket is not None:
        message.fd_socket = handle.fd_socket
    message.placement_notes.extend(handle.placement_notes)
    if handle.labels is not None:
        message.labels.CopyFrom(segment_ref_to_proto(handle.labels))
    if handle.resident_features is not None:
        message.resident_features.CopyFrom(segment_ref_to_proto(handle.resident_features))
    if handle.storage_features is not None:
        message.storage_features.CopyFrom(storage_ref_to_proto(handle.storage_features))
    if handle.hetero is not None:
        message.hetero_schema = handle.hetero.model_dump_json()
    if handle.edge_type is not None:
        message.edge_type.CopyFrom(segment_ref_to_proto(handle.edge_type))
    for name, hetero in handle.hetero_features.items():
        tiers = message.hetero_features[name]
        tiers.boundaries.CopyFrom(plan_to_proto(hetero.plan))
        if hetero.resident is not None:
            tiers.resident_features.CopyFrom(segment_ref_to_proto(hetero.resident))
        if hetero.storage is not None:
            tiers.storage_features.CopyFrom(storage_ref_to_proto(hetero.storage))
    return message


def _hetero_from_proto(message: datasets_pb2.HeteroFeatureTiers) -> HeteroFeatureRef:
    return HeteroFeatureRef(
        plan=plan_from_proto(message.boundaries),
        resident=segment_ref_from_proto(message.resident_features) if message.HasField("resident_features") else None,
        storage=storage_ref_from_proto(message.storage_features) if message.HasField("storage_features") else None,
    )


def layout_from_proto(message: datasets_pb2.DatasetLayout) -> DatasetLayoutInfo:
    handle = SharedDatasetHandle(
        dataset=message.dataset,
        plan=plan_from_proto(message.boundaries),
        colptr=segment_ref_from_proto(message.colptr),
        row=segment_ref_from_proto(message.row),
        labels=segment_ref_from_proto(message.labels) if message.HasField("labels") else None,
        splits={name: segment_ref_from_proto(ref) for name, ref in message.splits.items()},
        link_pairs={name: segment_ref_from_proto(ref) for name, ref in message.link_pairs.items()},
        resident_features=(
            segment_ref_from_proto(message.resident_features) if message.HasField("resident_features") else None
        ),
        storage_features=(
            storage_ref_from_proto(message.storage_features) if message.HasField("storage_features") else None
        ),
        device_tiers=tuple(
            DeviceTierRef(tier=ref.tier, slot=ref.slot, rows=ref.rows, memory=handle_from_proto(ref.memory))
            for ref in message.device_tiers
        ),
        fd_socket=message.fd_socket or None,
        placement_notes=tuple(message.placement_notes),
        hetero=HeteroSchema.model_validate_json(message.hetero_schema) if message.hetero_schema else None,
        edge_type=segment_ref_from_proto(message.edge_type) if message.HasField("edge_type") else None,
        hetero_features={name: _hetero_from_proto(tiers) for name, tiers in message.hetero_features.items()},
    )
    return DatasetLayoutInfo(
        handle=handle,
        tier_sizes=[TierBytes(tier=tier_from_proto(t.tier), rows=t.rows, bytes=t.bytes) for t in message.tier_sizes],
        num_edges=message.num_edges,
        feature_dim=message.feature_dim,
        num_classes=message.num_classes,
        feature_bytes=message.feature_bytes,
        structure_bytes=message.structure_bytes,
        device_bytes_per_device=message.device_bytes_per_device,
        simulated_devices=message.simulated_devices,
        owner_pid=message.owner_pid,
        loaded_at=from_timestamp(message.loaded_at),
        budgets=budgets_from_proto(message.budgets),
        version=message.version,
    )
