"""`DeviceTierRef`: one device-tier allocation as another process finds it (its memory handle).

The daemon's `DeviceTierSet` makes them; a dataset's `SharedDatasetHandle` carries them to
the consumers, whose `open_cuda_tiers` maps them. A plain pydantic model: no CUDA.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from graphtier.service.memory import MemoryHandle


class DeviceTierRef(BaseModel):
    """One device allocation of a device tier.

    `tier` "replicated": rows [0, replicated_end) on the GPU of `slot`; "interleaved": share
    `slot` (rows r with (r - replicated_end) % num_devices == slot, in order) on that GPU;
    "structure_colptr" / "structure_row": the device structure tier on that GPU, colptr[0..
    structure_device_end] (`rows` entries) and row[0:structure_device_edges] of the CSC, int64.
    The GPU is the memory handle's, named by PCI bus id (the same under any CUDA_VISIBLE_DEVICES).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Literal["replicated", "interleaved", "structure_colptr", "structure_row"]
    slot: int = Field(ge=0, description="Index of the GPU among the dataset's tier GPUs.")
    rows: int = Field(ge=0, description="Feature rows, or int64 entries of a structure array.")
    memory: MemoryHandle = Field(description="The allocation (device location); nbytes are the rows' bytes.")

    @field_validator("memory")
    @classmethod
    def _check_device(cls, memory: MemoryHandle) -> MemoryHandle:
        if memory.location != "device":
            raise ValueError(f"a device tier lives in device memory, not {memory.label}")
        return memory

    @property
    def pci_bus_id(self) -> str:
        return self.memory.pci_bus_id or ""
