"""Allocate and open memory of either location through one interface.

`allocate(...)` makes memory this process owns (a host segment of its `SegmentOwner`, or a
dedicated device allocation shared by IPC handle or VMM fd) and `open_memory(handle, ...)` maps
memory another process owns; both give a `SharedMemory`: its `handle`, the `device` its views
live on, `view(region)` (a CPU tensor for host memory, a CUDA tensor for device memory; no copy
either way) and `close()`. Code above this module never asks which location or mechanism it has.
"""

from __future__ import annotations

from typing import Protocol

import torch

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.memory.fd_passing import FdExporter
from graphtier.service.memory.handle import DeviceMemoryMode, MemoryHandle, Region
from graphtier.service.memory.host import HostAllocation, HostMapping
from graphtier.service.shm import SegmentOwner
from graphtier.service.shm.ref import torch_dtype


class SharedMemory(Protocol):
    """Memory shared between processes, seen from this one."""

    @property
    def handle(self) -> MemoryHandle: ...

    @property
    def device(self) -> torch.device: ...

    def view(self, region: Region) -> torch.Tensor: ...

    def close(self) -> None: ...


class _DeviceBytes(Protocol):
    """An allocation of ours or a mapping of another's (IPC or VMM) at device address `ptr`."""

    ptr: int

    def close(self) -> None: ...


class _DeviceMemory:
    """Device memory at `ptr` on GPU `index`: an allocation of ours or a mapping of another's."""

    def __init__(self, inner: _DeviceBytes, handle: MemoryHandle, index: int) -> None:
        self._inner, self._handle = inner, handle
        self.device = torch.device("cuda", index)

    @property
    def handle(self) -> MemoryHandle:
        return self._handle

    @property
    def ptr(self) -> int:
        return int(self._inner.ptr)

    def view(self, region: Region) -> torch.Tensor:
        """A CUDA tensor of `region` (no copy); valid until `close()`."""
        from graphtier.service.gpu.views import cuda_view

        if region.end > self._handle.nbytes:
            label, size = self._handle.label, self._handle.nbytes
            raise SharedMemoryError(f"{label}: region [{region.offset}, {region.end}) is outside its {size} bytes")
        dtype = torch_dtype(region.dtype)
        if region.nbytes == 0:
            return torch.empty(region.shape, dtype=dtype, device=self.device)
        assert self.device.index is not None
        return cuda_view(self.ptr + region.offset, region.shape, dtype, self.device.index, owner=self)

    def close(self) -> None:
        self._inner.close()


def allocate(
    label: str,
    nbytes: int,
    *,
    owner: SegmentOwner | None = None,
    device: int | None = None,
    mode: DeviceMemoryMode = "ipc",
    exporter: FdExporter | None = None,
) -> SharedMemory:
    """New shared memory of `nbytes`: host memory of `owner` when `device` is None, else device
    memory on GPU `device` shared as `mode` (vmm needs the `exporter` that passes its fd)."""
    if device is None:
        if owner is None:
            raise SharedMemoryError(f"host memory {label!r} needs the SegmentOwner that will unlink it")
        return HostAllocation(owner, label, nbytes)
    if mode == "vmm":
        from graphtier.service.memory.device_vmm import VmmAllocation

        if exporter is None:
            raise SharedMemoryError(f"VMM device memory {label!r} needs an FdExporter to pass its fd")
        vmm = VmmAllocation(device, max(nbytes, 1), label, exporter=exporter, export_id=label)
        return _DeviceMemory(vmm, vmm.handle, device)
    from graphtier.service.memory.device_ipc import DeviceAllocation

    ipc = DeviceAllocation(device, max(nbytes, 1), label)
    return _DeviceMemory(ipc, ipc.handle, device)


def open_memory(handle: MemoryHandle, *, device: int | None = None, writable: bool = False) -> SharedMemory:
    """Map memory another process shares: a host handle (read-only unless `writable`), or a device
    handle on this process's GPU `device` (its ordinal of the handle's GPU when None)."""
    if handle.location == "host":
        return HostMapping(handle, writable=writable)
    from graphtier.service.gpu.runtime import device_of_pci_bus_id

    index = device if device is not None else device_of_pci_bus_id(handle.pci_bus_id or "")
    if handle.mechanism == "vmm_fd":
        from graphtier.service.memory.device_vmm import VmmMapping

        return _DeviceMemory(VmmMapping(handle, index), handle, index)
    from graphtier.service.memory.device_ipc import IpcMapping

    return _DeviceMemory(IpcMapping(handle, index), handle, index)


def copy_host_to_device(memory: SharedMemory, offset: int, source: torch.Tensor) -> None:
    """Copy the contiguous CPU tensor `source` to byte `offset` of device `memory` (synchronously)."""
    if offset < 0 or offset + source.nbytes > memory.handle.nbytes:
        raise SharedMemoryError(
            f"{memory.handle.label}: {source.nbytes} bytes at offset {offset} are outside its {memory.handle.nbytes}"
        )
    if source.nbytes:
        region = Region(offset=offset, shape=(source.nbytes,), dtype="uint8")
        memory.view(region).copy_(source.reshape(-1).view(torch.uint8))
