"""Where each feature row lives: id boundaries of the tiers and the memory holding them.

After hotness reordering a row's tier follows from its id alone:
[0, replicated_end) replicated on every GPU, [replicated_end, interleaved_end) interleaved
across `num_devices` GPUs (row r on device (r - replicated_end) % num_devices),
[interleaved_end, host_end) pinned host memory, [host_end, num_rows) storage.
`resident` holds rows [0, host_end) and `storage` rows [host_end, num_rows). This CPU
gather reads the device tiers' rows from their host copy, so its counts are `simulated`;
the GPU gather (`graphtier.service.gpu`) reads them from GPU memory and reports them real.
`DEVICE_TIERS_SIMULATED` is what the daemon reports until a dataset is placed on GPUs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from graphtier.contract.errors import GraphtierError, PlacementError

if TYPE_CHECKING:
    from graphtier.service.storage import StorageReader

DEVICE_TIERS_SIMULATED = True  # until a dataset's device tiers are placed on GPUs


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlacementError(f"{name} must be an int, got {value!r}")
    return value


@dataclass(frozen=True)
class FeatureTiers:
    """Tier boundaries plus the two tensors that hold the rows; validated on construction."""

    replicated_end: int
    interleaved_end: int
    host_end: int
    num_rows: int
    num_devices: int
    device_index: int
    resident: torch.Tensor  # rows [0, host_end), contiguous CPU (host shm)
    storage: torch.Tensor  # rows [host_end, num_rows), contiguous CPU (memory-mapped file)
    simulated: bool = True
    # reads the storage rows from the file per batch (O_DIRECT or page cache) instead of
    # through the `storage` mapping; None keeps the mapping (graphtier.service.storage)
    storage_reader: StorageReader | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        bounds = {
            "replicated_end": self.replicated_end,
            "interleaved_end": self.interleaved_end,
            "host_end": self.host_end,
            "num_rows": self.num_rows,
        }
        for name, value in bounds.items():
            _check_int(name, value)
        if not 0 <= self.replicated_end <= self.interleaved_end <= self.host_end <= self.num_rows:
            shown = ", ".join(f"{k}={v}" for k, v in bounds.items())
            raise PlacementError(
                "tier boundaries must satisfy 0 <= replicated_end <= interleaved_end <= host_end <= num_rows, "
                f"got {shown}"
            )
        _check_int("num_devices", self.num_devices)
        _check_int("device_index", self.device_index)
        if self.num_devices < 1 or not 0 <= self.device_index < self.num_devices:
            raise PlacementError(
                f"need num_devices >= 1 and 0 <= device_index < num_devices, got num_devices={self.num_devices}, "
                f"device_index={self.device_index}"
            )
        for name, t in (("resident", self.resident), ("storage", self.storage)):
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu" or t.dim() < 1 or not t.is_contiguous():
                raise GraphtierError(
                    f"tiers.{name} must be a contiguous CPU tensor with a row dimension, got {t!r:.80}"
                )
        if self.resident.dtype != self.storage.dtype or self.resident.shape[1:] != self.storage.shape[1:]:
            raise GraphtierError(
                f"tiers.resident rows ({self.resident.dtype}, {tuple(self.resident.shape[1:])}) differ from "
                f"tiers.storage rows ({self.storage.dtype}, {tuple(self.storage.shape[1:])})"
            )
        if self.resident.shape[0] != self.host_end:
            raise GraphtierError(f"tiers.resident has {self.resident.shape[0]} rows but host_end is {self.host_end}")
        if self.storage.shape[0] != self.num_rows - self.host_end:
            raise GraphtierError(
                f"tiers.storage has {self.storage.shape[0]} rows "
                f"but num_rows - host_end is {self.num_rows - self.host_end}"
            )

    @classmethod
    def from_table(
        cls,
        table: torch.Tensor,
        *,
        replicated_end: int,
        interleaved_end: int,
        host_end: int,
        num_devices: int = 1,
        device_index: int = 0,
        simulated: bool = True,
    ) -> FeatureTiers:
        """Tiers over one contiguous [num_rows, ...] table: resident and storage are views of it."""
        if not isinstance(table, torch.Tensor) or table.dim() < 1 or not table.is_contiguous():
            raise GraphtierError("table must be a contiguous tensor with a row dimension")
        _check_int("host_end", host_end)
        if not 0 <= host_end <= table.shape[0]:
            raise PlacementError(
                f"host_end={host_end} is outside [0, {table.shape[0]}] for a table of {table.shape[0]} rows"
            )
        return cls(
            replicated_end=replicated_end,
            interleaved_end=interleaved_end,
            host_end=host_end,
            num_rows=table.shape[0],
            num_devices=num_devices,
            device_index=device_index,
            resident=table[:host_end],
            storage=table[host_end:],
            simulated=simulated,
        )

    @property
    def dtype(self) -> torch.dtype:
        return self.resident.dtype

    @property
    def row_shape(self) -> tuple[int, ...]:
        return tuple(self.resident.shape[1:])

    @property
    def row_bytes(self) -> int:
        return math.prod(self.row_shape) * self.resident.element_size()

    @property
    def boundaries(self) -> tuple[int, int, int, int]:
        """(replicated_end, interleaved_end, host_end, num_rows)."""
        return (self.replicated_end, self.interleaved_end, self.host_end, self.num_rows)
