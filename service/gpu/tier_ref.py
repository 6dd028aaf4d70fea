"""`DeviceTierRef`: one device-tier allocation as another process finds it (a CUDA IPC handle).

The daemon's `DeviceTierSet` makes them; a dataset's `SharedDatasetHandle` carries them to
the consumers, whose `open_cuda_tiers` maps them. A plain pydantic model: no torch, no CUDA.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DeviceTierRef(BaseModel):
    """One device allocation of a device tier, shared as a CUDA IPC handle.

    `tier` "replicated": rows [0, replicated_end) on the GPU of `slot`; "interleaved": share
    `slot` (rows r with (r - replicated_end) % num_devices == slot, in order) on that GPU;
    "structure_colptr" / "structure_row": the device structure tier on that GPU, colptr[0..
    structure_device_end] (`rows` entries) and row[0:structure_device_edges] of the CSC, int64.
    The GPU is named by PCI bus id, which is the same under any CUDA_VISIBLE_DEVICES.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Literal["replicated", "interleaved", "structure_colptr", "structure_row"]
    slot: int = Field(ge=0, description="Index of the GPU among the dataset's tier GPUs.")
    pci_bus_id: str = Field(min_length=1, max_length=32)
    kind: Literal["ipc"] = Field("ipc", description="How the memory is shared: a cudaIpcMemHandle_t.")
    handle: str = Field(pattern=r"^[0-9a-f]{128}$", description="The 64 handle bytes, hex.")
    nbytes: int = Field(ge=0, description="Bytes of rows in the allocation (it is padded to 2 MiB).")
    rows: int = Field(ge=0, description="Feature rows, or int64 entries of a structure array.")
    owner_pid: int = Field(ge=0, description="The daemon process that owns (and frees) the memory.")
