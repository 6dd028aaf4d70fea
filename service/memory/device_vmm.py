"""Device memory shared as CUDA VMM allocations exported as POSIX file descriptors.

The owner creates physical memory with `cuMemCreate` (pinned, on one GPU, shareable as a POSIX
fd), maps it into its own address space (`cuMemAddressReserve` + `cuMemMap` + `cuMemSetAccess`)
and exports the fd (`cuMemExportToShareableHandle`) into its `FdExporter`. A consumer fetches the
fd over the Unix socket, imports it (`cuMemImportFromShareableHandle`), closes the fd and maps the
allocation the same way. The physical memory lives until the last mapping and the last handle are
gone, whoever goes first; unlike legacy IPC handles, fds cross PID namespaces (pods without
hostPID) and a consumer may outlive the owner's mapping. Calls go through cuda-python's driver
API (`cuda.bindings.driver`), which shares torch's primary contexts.
"""

from __future__ import annotations

import os
from typing import Any

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.gpu.runtime import CudaError, check_driver, driver, on_device, pci_bus_id
from graphtier.service.memory.fd_passing import FdExporter, fetch_fds
from graphtier.service.memory.handle import MemoryHandle

_initialised: list[Any] = []


def _driver() -> Any:
    """`cuda.bindings.driver` after cuInit; CudaError when cuda-python or the NVIDIA driver is missing
    (cuda-python raises its own RuntimeError for the latter) or the driver cannot initialise."""
    if not _initialised:
        d = driver()
        try:
            result = d.cuInit(0)
        except RuntimeError as exc:
            raise CudaError(f"the CUDA driver cannot be used ({type(exc).__name__}: {exc})") from None
        check_driver(result, "cuInit (no usable NVIDIA driver or device?)")
        _initialised.append(d)
    return _initialised[0]


def _properties(device: int) -> Any:
    d = _driver()
    prop = d.CUmemAllocationProp()
    prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = device
    prop.requestedHandleTypes = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    return prop


def granularity(device: int) -> int:
    """The allocation granularity the driver recommends on `device` (sizes are rounded up to it)."""
    d = _driver()
    flag = d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
    return int(
        check_driver(d.cuMemGetAllocationGranularity(_properties(device), flag), "cuMemGetAllocationGranularity")
    )


class _Mapping:
    """`size` bytes of allocation `generic` mapped read-write for `device` at `ptr`."""

    def __init__(self, generic: Any, size: int, device: int, label: str) -> None:
        d = _driver()
        self.device, self.size, self.label, self.generic = device, size, label, generic
        self.ptr = 0
        reserved = int(check_driver(d.cuMemAddressReserve(size, 0, 0, 0), f"cuMemAddressReserve for {label}"))
        try:
            check_driver(d.cuMemMap(reserved, size, 0, generic, 0), f"cuMemMap of {label}")
            try:
                access = d.CUmemAccessDesc()
                access.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
                access.location.id = device
                access.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
                check_driver(d.cuMemSetAccess(reserved, size, [access], 1), f"cuMemSetAccess of {label}")
            except BaseException:
                d.cuMemUnmap(reserved, size)
                raise
        except BaseException:
            d.cuMemAddressFree(reserved, size)
            raise
        self.ptr = reserved

    def close(self) -> None:
        """Unmap, free the address range and drop this process's handle (the memory goes with the last)."""
        if not self.ptr:
            return
        d = _driver()
        ptr, self.ptr = self.ptr, 0
        check_driver(d.cuMemUnmap(ptr, self.size), f"cuMemUnmap of {self.label}")
        check_driver(d.cuMemAddressFree(ptr, self.size), f"cuMemAddressFree of {self.label}")
        check_driver(d.cuMemRelease(self.generic), f"cuMemRelease of {self.label}")


class VmmAllocation:
    """`nbytes` of device memory on `device`, exported as a POSIX fd under `export_id` in `exporter`."""

    def __init__(self, device: int, nbytes: int, label: str, *, exporter: FdExporter, export_id: str) -> None:
        if nbytes <= 0:
            raise CudaError(f"{label}: cannot allocate {nbytes} bytes of device memory")
        if export_id in exporter.exported():  # before any CUDA call: the other allocation's fd stays
            raise SharedMemoryError(f"cannot export fd {export_id!r} for {label}: it is exported already")
        d = _driver()
        self.device, self.label, self.nbytes = device, label, nbytes
        self.pci_bus_id = pci_bus_id(device)
        self.owner_pid = os.getpid()
        self._exporter, self.export_id = exporter, export_id
        with on_device(device):
            step = granularity(device)
            self.padded_bytes = -(-nbytes // step) * step
            generic = check_driver(
                d.cuMemCreate(self.padded_bytes, _properties(device), 0),
                f"cuMemCreate of {self.padded_bytes} B for {label}",
            )
            added = False  # whether this object exported `export_id` (the error path removes only its own)
            try:
                fd = int(
                    check_driver(
                        d.cuMemExportToShareableHandle(
                            generic, d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0
                        ),
                        f"cuMemExportToShareableHandle of {label}",
                    )
                )
                try:
                    exporter.add(export_id, fd)
                    added = True
                finally:
                    os.close(fd)
                self._mapping = _Mapping(generic, self.padded_bytes, device, label)
            except BaseException:
                if added:
                    exporter.remove(export_id)
                d.cuMemRelease(generic)
                raise
        self.ptr = self._mapping.ptr

    @property
    def handle(self) -> MemoryHandle:
        return MemoryHandle(
            location="device",
            mechanism="vmm_fd",
            nbytes=self.nbytes,
            owner_pid=self.owner_pid,
            export_socket=self._exporter.path,
            export_id=self.export_id,
            pci_bus_id=self.pci_bus_id,
        )

    def close(self) -> None:
        """Stop exporting and drop the owner's mapping; consumers' mappings keep the memory alive."""
        self._exporter.remove(self.export_id)
        with on_device(self.device):
            self._mapping.close()
        self.ptr = 0


class VmmMapping:
    """A consumer's mapping of a `vmm_fd` handle on its GPU `device`; `close()` unmaps it."""

    def __init__(self, handle: MemoryHandle, device: int) -> None:
        if handle.mechanism != "vmm_fd" or handle.export_socket is None or handle.export_id is None:
            raise CudaError(f"{handle.label} is not a VMM fd handle")
        d = _driver()
        self.handle, self.device = handle, device
        (fd,) = fetch_fds(handle.export_socket, [handle.export_id])
        try:
            with on_device(device):
                generic = check_driver(
                    d.cuMemImportFromShareableHandle(
                        fd, d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                    ),
                    f"cuMemImportFromShareableHandle of {handle.label}",
                )
                try:
                    step = granularity(device)
                    size = -(-max(handle.nbytes, 1) // step) * step
                    self._mapping = _Mapping(generic, size, device, handle.label)
                except BaseException:
                    d.cuMemRelease(generic)
                    raise
        finally:
            os.close(fd)  # the imported handle holds the allocation now
        self.ptr = self._mapping.ptr

    def close(self) -> None:
        with on_device(self.device):
            self._mapping.close()
        self.ptr = 0


def vmm_supported(device: int) -> bool:
    """Whether `device` can create VMM allocations shareable as POSIX fds."""
    d = _driver()
    attr = d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
    return bool(check_driver(d.cuDeviceGetAttribute(attr, device), f"POSIX fd handle support of GPU {device}"))
