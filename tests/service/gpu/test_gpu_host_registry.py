"""Host registration: once per range per process, users counted, overlaps refused, unregistered."""

from __future__ import annotations

import mmap

import pytest
from gpu_marks import needs_cuda

pytestmark = needs_cuda


def test_registration_is_shared_counted_and_released():
    import ctypes

    from graphtier.service.gpu.host_registry import HostRegistry
    from graphtier.service.gpu.runtime import CudaError, check, cudart

    buf = mmap.mmap(-1, 64 * mmap.PAGESIZE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    reg = HostRegistry()
    try:
        whole = reg.register(base, 16 * mmap.PAGESIZE, "whole", read_only=False)
        inner = reg.register(base + 100, 200, "inner", read_only=False)
        assert inner is whole and whole.users == 2
        with pytest.raises(CudaError, match="overlaps the registration of whole"):
            reg.register(base + 8 * mmap.PAGESIZE, 16 * mmap.PAGESIZE, "straddling", read_only=False)
        rt = cudart()
        attributes = check(rt.cudaPointerGetAttributes(base), "attributes")
        assert attributes.type == rt.cudaMemoryType.cudaMemoryTypeHost and attributes.devicePointer == base
        reg.release(inner)
        assert reg.registrations() == [whole]
        reg.release(whole)
        assert reg.registrations() == []
        after = check(rt.cudaPointerGetAttributes(base), "attributes")
        assert after.type == rt.cudaMemoryType.cudaMemoryTypeUnregistered, "the range is still registered"
    finally:
        del base
        buf.close()
