"""Host-located memory: POSIX shm segments (`mechanism` shm), made by a `SegmentOwner`.

The owner (graphtier.service.shm) creates, seals and unlinks segments and reclaims those of
owners that died; this module gives them the handle form every consumer opens, and opens them
on the other side by name (read-only unless asked). A sealed 0400 segment that a GPU must
register writable is mapped from a read-write fd its owner passes (`open_read_write_fd` here,
fd_passing.py, and graphtier.service.store.device_tiers).
"""

from __future__ import annotations

import mmap
import os

import torch

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.memory.handle import MemoryHandle, Region
from graphtier.service.shm import SegmentOwner, SharedSegment
from graphtier.service.shm.ref import check_span, map_segment, torch_dtype, view_of_mapping

CPU = torch.device("cpu")


class HostAllocation:
    """One shm segment of `owner` as a handle; `view` carves writable tensors out of it."""

    def __init__(self, owner: SegmentOwner, label: str, nbytes: int) -> None:
        self.owner, self.label = owner, label
        self.segment: SharedSegment = owner.create(label, nbytes)
        self.handle = MemoryHandle(
            location="host", mechanism="shm", nbytes=nbytes, owner_pid=os.getpid(), shm_name=self.segment.name
        )
        self.device = CPU

    def view(self, region: Region) -> torch.Tensor:
        """A writable zero-copy tensor of `region`."""
        return self.segment.view(region.shape, region.dtype, region.offset)

    def open_read_write_fd(self) -> int:
        """A new read-write fd of the segment, for an `FdExporter` (open it before `seal`; the caller closes it)."""
        try:
            return os.open(self.segment.path, os.O_RDWR)
        except OSError as exc:
            raise SharedMemoryError(f"cannot open {self.segment.path} read-write: {exc.strerror}") from None

    def close(self) -> None:
        """Unlink the segment (live views stay valid until they are dropped); idempotent."""
        if self.label in self.owner.segments:
            self.owner.remove(self.label)


class HostMapping:
    """A consumer's mapping of a host handle, by segment name (read-only unless `writable`)."""

    def __init__(self, handle: MemoryHandle, *, writable: bool = False) -> None:
        if handle.location != "host" or handle.shm_name is None:
            raise SharedMemoryError(f"{handle.label} is not host shared memory")
        self.handle, self.writable, self.device = handle, writable, CPU
        mapping, self._size = map_segment(handle.shm_name, writable=writable)
        self._mapping: mmap.mmap | None = mapping  # None once closed
        if self._size < handle.nbytes:
            raise SharedMemoryError(
                f"segment {handle.shm_name!r} holds {self._size} bytes, the handle says {handle.nbytes}"
            )

    @property
    def address(self) -> int:
        """The host address of the mapping's first byte (for registration with CUDA)."""
        return torch.frombuffer(self.mapping, dtype=torch.uint8, count=1).data_ptr()

    @property
    def mapping(self) -> mmap.mmap:
        if self._mapping is None:
            raise SharedMemoryError(f"{self.handle.label}: this mapping of it is closed")
        return self._mapping

    def view(self, region: Region) -> torch.Tensor:
        """A zero-copy tensor of `region`; it keeps the mapping alive while it lives."""
        name = self.handle.shm_name or ""
        check_span(name, self._size, region.offset, region.nbytes, region.shape, region.dtype)
        dtype = torch_dtype(region.dtype)
        if region.nbytes == 0:
            return torch.empty(region.shape, dtype=dtype)
        return view_of_mapping(self.mapping, region.shape, dtype, region.offset, read_only=not self.writable)

    def close(self) -> None:
        """Drop this object's reference; views made from it keep the mapping until they go."""
        self._mapping = None
