"""Device memory shared between processes as legacy CUDA IPC handles (`mechanism` cuda_ipc).

The daemon allocates each device tier with its own `cudaMalloc` (never a block of torch's
caching allocator, which would share an IPC handle with its neighbours), rounded up to 2 MiB,
fills it once and hands out the 64-byte `cudaIpcMemHandle_t`. A consumer opens a handle once
per process (`opened_handles()` counts users) with lazy peer access, so a peer GPU's share is
reachable over NVLink, and closes it when its last user detaches. The memory stays the
daemon's: it outlives every job that maps it and is freed when the daemon unloads the dataset.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Any

from graphtier.service.gpu.runtime import CudaError, check, cudart, device_of_pci_bus_id, on_device, pci_bus_id
from graphtier.service.memory.handle import MemoryHandle

ALLOCATION_ALIGN = 2 << 20
IPC_HANDLE_BYTES = 64


def _handle_bytes(handle: Any) -> bytes:
    """The bytes of a `cudaIpcMemHandle_t` (cuda-bindings, reached untyped through `cudart()`)."""
    return ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)


def _handle_from_bytes(raw: bytes) -> object:
    if len(raw) != IPC_HANDLE_BYTES:
        raise CudaError(f"a CUDA IPC handle is {IPC_HANDLE_BYTES} bytes, got {len(raw)}")
    handle = cudart().cudaIpcMemHandle_t()
    ctypes.memmove(handle.getPtr(), raw, IPC_HANDLE_BYTES)
    return handle


class DeviceAllocation:
    """`nbytes` of device memory on `device`, owned by this object until `close()`."""

    def __init__(self, device: int, nbytes: int, label: str) -> None:
        if nbytes <= 0:
            raise CudaError(f"{label}: cannot allocate {nbytes} bytes of device memory")
        self.device = device
        self.label = label
        self.nbytes = nbytes
        self.padded_bytes = -(-nbytes // ALLOCATION_ALIGN) * ALLOCATION_ALIGN
        self.pci_bus_id = pci_bus_id(device)
        with on_device(device):
            self.ptr = int(
                check(
                    cudart().cudaMalloc(self.padded_bytes),
                    f"cudaMalloc of {self.padded_bytes} bytes for {label} on GPU {device}",
                )
            )
        self.owner_pid = os.getpid()
        self._handle: MemoryHandle | None = None

    def copy_from_host(self, offset: int, host_ptr: int, nbytes: int) -> None:
        """Synchronous copy of `nbytes` at host address `host_ptr` to byte `offset` of this allocation."""
        if offset < 0 or offset + nbytes > self.nbytes:
            raise CudaError(f"{self.label}: copy of {nbytes} bytes at offset {offset} is outside {self.nbytes} bytes")
        rt = cudart()
        with on_device(self.device):
            check(
                rt.cudaMemcpy(self.ptr + offset, host_ptr, nbytes, rt.cudaMemcpyKind.cudaMemcpyHostToDevice),
                f"filling {self.label} on GPU {self.device}",
            )

    def ipc_handle(self) -> bytes:
        with on_device(self.device):
            raw = check(cudart().cudaIpcGetMemHandle(self.ptr), f"cudaIpcGetMemHandle of {self.label}")
        return _handle_bytes(raw)

    @property
    def handle(self) -> MemoryHandle:
        """The wire form another process opens (`IpcMapping`); made once, then noted as this process's own."""
        if self._handle is None:
            raw = self.ipc_handle()
            opened_handles().note_local(raw, self.ptr)
            self._handle = MemoryHandle(
                location="device",
                mechanism="cuda_ipc",
                nbytes=self.nbytes,
                owner_pid=self.owner_pid,
                ipc_handle=raw.hex(),
                pci_bus_id=self.pci_bus_id,
            )
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            opened_handles().forget_local(bytes.fromhex(self._handle.ipc_handle or ""))
            self._handle = None
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with on_device(self.device):
                check(cudart().cudaFree(ptr), f"cudaFree of {self.label}")


@dataclass
class _Opened:
    ptr: int
    device: int
    users: int


class OpenedHandles:
    """IPC handles this process has opened, by (handle, device); use `opened_handles()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[bytes, int], _Opened] = {}
        self._local: dict[bytes, int] = {}  # handles of allocations made by this very process

    def note_local(self, handle: bytes, ptr: int) -> None:
        """This process made the allocation behind `handle` (a handle cannot be opened by its maker)."""
        with self._lock:
            self._local[handle] = ptr

    def forget_local(self, handle: bytes) -> None:
        with self._lock:
            self._local.pop(handle, None)

    def open(self, handle: bytes, device: int, label: str) -> int:
        """Map `handle` into `device`'s address space (peer access enabled lazily); its address."""
        with self._lock:
            if handle in self._local:
                return self._local[handle]
            key = (handle, device)
            opened = self._open.get(key)
            if opened is None:
                rt = cudart()
                with on_device(device):
                    ptr = check(
                        rt.cudaIpcOpenMemHandle(_handle_from_bytes(handle), rt.cudaIpcMemLazyEnablePeerAccess),
                        f"cudaIpcOpenMemHandle of {label} on GPU {device} (is the daemon that owns it alive?)",
                    )
                opened = self._open[key] = _Opened(ptr=int(ptr), device=device, users=0)
            opened.users += 1
            return opened.ptr

    def close(self, handle: bytes, device: int, label: str) -> None:
        """Drop one user; the last one closes the mapping."""
        with self._lock:
            if handle in self._local:
                return
            opened = self._open.get((handle, device))
            if opened is None:
                return
            opened.users -= 1
            if opened.users == 0:
                del self._open[(handle, device)]
                with on_device(device):
                    check(cudart().cudaIpcCloseMemHandle(opened.ptr), f"cudaIpcCloseMemHandle of {label}")

    def count(self) -> int:
        with self._lock:
            return len(self._open)


_opened: list[OpenedHandles] = []
_opened_lock = threading.Lock()


def opened_handles() -> OpenedHandles:
    """The IPC handles of this process (created on first use)."""
    with _opened_lock:
        if not _opened:
            _opened.append(OpenedHandles())
        return _opened[0]


# A forked child (a DataLoader worker, say) shares no CUDA state with its parent: it must not
# close the parent's mappings, so it starts with an empty registry.
os.register_at_fork(after_in_child=_opened.clear)


class IpcMapping:
    """A consumer's mapping of a `cuda_ipc` handle on its GPU `device` (shared with every other user
    of the same handle in this process); `close()` drops this user."""

    def __init__(self, handle: MemoryHandle, device: int) -> None:
        if handle.mechanism != "cuda_ipc" or handle.ipc_handle is None:
            raise CudaError(f"{handle.label} is not a CUDA IPC handle")
        self.handle, self.device = handle, device
        self._raw = bytes.fromhex(handle.ipc_handle)
        self.ptr = opened_handles().open(self._raw, device, handle.label)

    def close(self) -> None:
        if self.ptr:
            self.ptr = 0
            opened_handles().close(self._raw, self.device, self.handle.label)


def local_device_of(pci_bus: str) -> int:
    """This process's ordinal for the GPU the daemon named by PCI bus id."""
    return device_of_pci_bus_id(pci_bus)
