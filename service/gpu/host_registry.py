"""Host memory registered with the CUDA driver, once per process, for zero-copy reads.

A process that attaches a dataset on a CUDA machine registers its own mapping of the host
tier (and the CSC structure) with `cudaHostRegister` (portable | mapped | read-only). Under
unified addressing the device address of a registered byte is its host address, so a kernel
reads the rows in place over PCIe and no copy of the tier is ever made. Registering a range
that overlaps a registered one is an error of the driver (cudaErrorHostMemoryAlreadyRegistered),
so the registry holds one registration per range, counts its users, and unregisters when the
last one releases it. Huge pages are advised first (fewer pages to pin, faster registration).
"""

from __future__ import annotations

import ctypes
import logging
import mmap
import os
import threading
import time
from dataclasses import dataclass

from graphtier.service.gpu.runtime import CudaError, check, cudart, on_device, read_only_registration_supported

log = logging.getLogger("graphtier.gpu")

_PAGE = mmap.PAGESIZE
_MADV_HUGEPAGE = 14


def _advise_huge_pages(start: int, nbytes: int) -> bool:
    """madvise(MADV_HUGEPAGE) on the range; False where the kernel refuses (no THP for shm)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(nbytes), _MADV_HUGEPAGE) == 0


@dataclass
class HostRegistration:
    """One registered page range of this process's address space."""

    start: int
    nbytes: int
    label: str
    seconds: float
    huge_pages: bool
    device: int = 0
    users: int = 1

    @property
    def end(self) -> int:
        return self.start + self.nbytes


class HostRegistry:
    """This process's registrations; use `host_registry()` for the process-wide instance."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: dict[int, HostRegistration] = {}

    def register(
        self, ptr: int, nbytes: int, label: str, *, device: int = 0, read_only: bool = True
    ) -> HostRegistration:
        """Register the pages holding [ptr, ptr + nbytes) (or add a user to the range holding
        them) and return the registration; CudaError on an overlap or a driver failure.
        `read_only`: the pages are mapped PROT_READ; GPUs that cannot register such memory
        (cudaDevAttrHostRegisterReadOnlySupported = 0) get a CudaError saying so."""
        if nbytes <= 0:
            raise CudaError(f"cannot register {label}: {nbytes} bytes")
        start = ptr - ptr % _PAGE
        end = -(-(ptr + nbytes) // _PAGE) * _PAGE
        with self._lock:
            for reg in self._ranges.values():
                if reg.start <= start and end <= reg.end:
                    reg.users += 1
                    return reg
                if start < reg.end and reg.start < end:
                    raise CudaError(
                        f"cannot register {label} [{start:#x}, {end:#x}): it overlaps the registration of "
                        f"{reg.label} [{reg.start:#x}, {reg.end:#x}) without being inside it"
                    )
            rt = cudart()
            if read_only and not read_only_registration_supported(device):
                raise CudaError(
                    f"cannot register {label}: it is mapped read-only and GPU {device} cannot register read-only host "
                    "memory (cudaDevAttrHostRegisterReadOnlySupported = 0); register a writable mapping instead"
                )
            huge = _advise_huge_pages(start, end - start)  # after filling it only helps pages faulted later
            flags = rt.cudaHostRegisterPortable | rt.cudaHostRegisterMapped
            if read_only:
                flags |= rt.cudaHostRegisterReadOnly
            with on_device(device):
                t0 = time.perf_counter()
                check(rt.cudaHostRegister(start, end - start, flags), f"cudaHostRegister of {label} ({end - start} B)")
                seconds = time.perf_counter() - t0
                try:
                    device_ptr = int(
                        check(rt.cudaHostGetDevicePointer(start, 0), f"cudaHostGetDevicePointer of {label}")
                    )
                    if device_ptr != start:
                        raise CudaError(
                            f"{label}: the device address {device_ptr:#x} of registered host memory differs from its "
                            f"host address {start:#x} (no unified addressing); zero-copy views need UVA"
                        )
                except BaseException:
                    rt.cudaHostUnregister(start)
                    raise
            reg = HostRegistration(
                start=start, nbytes=end - start, label=label, seconds=seconds, huge_pages=huge, device=device
            )
            self._ranges[start] = reg
        log.info(
            "registered %s with CUDA: %.1f MiB in %.3f s (huge pages %s)",
            label,
            reg.nbytes / 2**20,
            seconds,
            "advised" if huge else "refused",
        )
        return reg

    def release(self, reg: HostRegistration) -> None:
        """Drop one user of `reg`; the last one unregisters the range."""
        with self._lock:
            if self._ranges.get(reg.start) is not reg or reg.users <= 0:
                return
            reg.users -= 1
            if reg.users:
                return
            del self._ranges[reg.start]
            with on_device(reg.device):
                check(cudart().cudaHostUnregister(reg.start), f"cudaHostUnregister of {reg.label}")

    def registrations(self) -> list[HostRegistration]:
        with self._lock:
            return sorted(self._ranges.values(), key=lambda r: r.start)


_registry: list[HostRegistry] = []
_registry_lock = threading.Lock()


def host_registry() -> HostRegistry:
    """The registry of this process (created on first use)."""
    with _registry_lock:
        if not _registry:
            _registry.append(HostRegistry())
        return _registry[0]


os.register_at_fork(after_in_child=_registry.clear)  # a forked child registered nothing itself
