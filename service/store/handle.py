"""`SharedDatasetHandle`: everything another process needs to attach a loaded dataset."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.hetero import HeteroSchema
from graphtier.service.placement import PlacementPlan
from graphtier.service.shm import SegmentRef
from graphtier.service.store.tier_ref import DeviceTierRef


class StorageTierRef(BaseModel):
    """Rows [first_row, first_row + rows) of the feature matrix, read from a file (the storage tier)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    offset_bytes: int = Field(ge=0)
    first_row: int = Field(ge=0)
    rows: int = Field(ge=0)
    row_shape: tuple[int, ...]
    dtype: str
    row_checksums: SegmentRef | None = Field(
        None,
        description="the checksum of every row of the file (int64 [num_nodes], `row_checksums`), which "
        "each read of storage rows is checked against; None for datasets prepared before they were recorded",
    )


class HeteroFeatureRef(BaseModel):
    """One node type's feature rows: its own plan over its type-local rows, resident rows and storage rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plan: PlacementPlan = Field(description="tier boundaries over the type's rows (its share of the byte budget)")
    resident: SegmentRef | None = Field(description="rows [0, plan.host_end) in shared memory")
    storage: StorageTierRef | None = Field(description="rows [plan.host_end, plan.num_nodes) read from its file")


class SharedDatasetHandle(BaseModel):
    """Names, offsets, shapes and dtypes only: tensors never travel in messages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    plan: PlacementPlan
    colptr: SegmentRef
    row: SegmentRef
    labels: SegmentRef | None
    splits: dict[str, SegmentRef]
    link_pairs: dict[str, SegmentRef] = Field(
        default_factory=dict,
        description="link prediction's int64 [n, 2] node pairs by array name (link_train, link_test_neg, ...); "
        "empty without an edge split",
    )
    resident_features: SegmentRef | None = Field(description="rows [0, plan.host_end): device tiers + host tier")
    storage_features: StorageTierRef | None
    device_tiers: tuple[DeviceTierRef, ...] = Field(
        default=(), description="GPU allocations of the device tiers; empty when they are accounted only."
    )
    fd_socket: str | None = Field(
        default=None,
        description="The owner's Unix socket passing read-write fds of the host segments by segment name (for "
        "GPUs that cannot register read-only host memory) and the fds of VMM device tiers; None: not served.",
    )
    placement_notes: tuple[str, ...] = Field(
        default=(), description="Why the placement differs from the budgets asked for (e.g. no peer access)."
    )
    hetero: HeteroSchema | None = Field(default=None, description="a heterogeneous dataset's schema; None: homogeneous")
    edge_type: SegmentRef | None = Field(
        default=None, description="heterogeneous: int16 [num_edges], each entry's relation"
    )
    hetero_features: dict[str, HeteroFeatureRef] = Field(
        default_factory=dict, description="heterogeneous: each featured node type's feature tiers, by type name"
    )
    class_labels: tuple[int, ...] | None = Field(
        default=None,
        description="The source's label of each class when prepare remapped the labels to dense "
        "classes 0..k-1 (the manifest's class_labels); None: the labels are the source's.",
    )
