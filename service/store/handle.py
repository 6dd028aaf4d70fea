"""`SharedDatasetHandle`: everything another process needs to attach a loaded dataset."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from graphtier.service.placement import PlacementPlan
from graphtier.service.shm import SegmentRef


class StorageTierRef(BaseModel):
    """Rows [first_row, first_row + rows) of the feature matrix, read from a file (the storage tier)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    offset_bytes: int = Field(ge=0)
    first_row: int = Field(ge=0)
    rows: int = Field(ge=0)
    row_shape: tuple[int, ...]
    dtype: str


class DeviceTierRef(BaseModel):
    """One device allocation of a device tier, shared as a CUDA IPC handle.

    `tier` "replicated": rows [0, replicated_end) on the GPU of `slot`; "interleaved": share
    `slot` (rows r with (r - replicated_end) % num_devices == slot, in order) on that GPU.
    The GPU is named by PCI bus id, which is the same under any CUDA_VISIBLE_DEVICES.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Literal["replicated", "interleaved"]
    slot: int = Field(ge=0, description="Index of the GPU among the dataset's tier GPUs.")
    pci_bus_id: str = Field(min_length=1, max_length=32)
    kind: Literal["ipc"] = Field("ipc", description="How the memory is shared: a cudaIpcMemHandle_t.")
    handle: str = Field(pattern=r"^[0-9a-f]{128}$", description="The 64 handle bytes, hex.")
    nbytes: int = Field(ge=0, description="Bytes of rows in the allocation (it is padded to 2 MiB).")
    rows: int = Field(ge=0)
    owner_pid: int = Field(ge=0, description="The daemon process that owns (and frees) the memory.")


class SharedDatasetHandle(BaseModel):
    """Names, offsets, shapes and dtypes only: tensors never travel in messages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    plan: PlacementPlan
    colptr: SegmentRef
    row: SegmentRef
    labels: SegmentRef | None
    splits: dict[str, SegmentRef]
    resident_features: SegmentRef | None = Field(description="rows [0, plan.host_end): device tiers + host tier")
    storage_features: StorageTierRef | None
    device_tiers: tuple[DeviceTierRef, ...] = Field(
        default=(), description="GPU allocations of the device tiers; empty when they are accounted only."
    )
    placement_notes: tuple[str, ...] = Field(
        default=(), description="Why the placement differs from the budgets asked for (e.g. no peer access)."
    )
    class_labels: tuple[int, ...] | None = Field(
        default=None, description="The source's label of each class when prepare remapped the labels to dense "
        "classes 0..k-1 (the manifest's class_labels); None: the labels are the source's."
    )
