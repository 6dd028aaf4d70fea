"""One writable shared-memory segment, as its creator sees it.

Created with `os.open(O_CREAT | O_EXCL)` + `os.ftruncate` + `mmap` on a file in /dev/shm
(not `multiprocessing.shared_memory`, whose resource tracker unlinks segments behind the
owner's back). Pages are reserved up front with `posix_fallocate`, so a full /dev/shm is a
clear error at creation instead of a SIGBUS on first write. Segments are made and unlinked
only by a `SegmentOwner`; this class maps one and carves tensors and references out of it.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import shutil
from collections.abc import Sequence

import torch

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.shm.naming import SHM_DIR, segment_path
from graphtier.service.shm.ref import SegmentRef, dtype_name, torch_dtype, view_of_mapping


class SharedSegment:
    """A mapped segment of `nbytes` bytes named `name`; views of it are zero-copy and writable.

    The mapping stays valid while this object or any tensor made from it lives, even after
    the owner has unlinked the file (the memory is freed when the last mapping goes).
    """

    def __init__(self, name: str, label: str, nbytes: int, mapping: mmap.mmap) -> None:
        self.name = name
        self.label = label
        self.nbytes = nbytes
        self._mapping = mapping
        self._base = torch.frombuffer(mapping, dtype=torch.uint8, count=1).data_ptr()
        self.sealed = False

    def __repr__(self) -> str:
        return f"SharedSegment(name={self.name!r}, nbytes={self.nbytes})"

    @property
    def path(self) -> str:
        return segment_path(self.name)

    def _check_span(self, shape: Sequence[int], dtype: torch.dtype, offset: int) -> None:
        if any(int(d) < 0 for d in shape):
            raise SharedMemoryError(f"shape {list(shape)} has a negative dimension")
        if offset < 0 or offset % dtype.itemsize:
            raise SharedMemoryError(
                f"offset {offset} into segment {self.name!r} must be >= 0 and a multiple of {dtype.itemsize}"
            )
        nbytes = dtype.itemsize
        for d in shape:
            nbytes *= int(d)
        if offset + nbytes > self.nbytes:
            raise SharedMemoryError(
                f"shape {list(shape)} of {dtype_name(dtype)} at offset {offset} needs bytes "
                f"[{offset}, {offset + nbytes}) but segment {self.name!r} holds {self.nbytes}"
            )

    def view(self, shape: Sequence[int], dtype: torch.dtype | str, offset: int = 0) -> torch.Tensor:
        """A writable zero-copy tensor of `shape`/`dtype` starting at byte `offset`."""
        dt = torch_dtype(dtype_name(dtype))
        self._check_span(shape, dt, offset)
        return view_of_mapping(self._mapping, [int(d) for d in shape], dt, offset, read_only=False)

    def ref(self, shape: Sequence[int], dtype: torch.dtype | str, offset: int = 0) -> SegmentRef:
        """The reference another process passes to `attach_tensor` to see the same view."""
        name = dtype_name(dtype)
        self._check_span(shape, torch_dtype(name), offset)
        return SegmentRef(name=self.name, offset=offset, shape=tuple(int(d) for d in shape), dtype=name)

    def seal(self) -> None:
        """Make the filled segment read-only: file mode 0400 (another process of this user can no
        longer open it for writing) and this mapping PROT_READ (a stray write faults instead of
        silently changing what every consumer reads). Views made before keep working for reads."""
        os.chmod(self.path, 0o400)
        length = -(-max(self.nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        if libc.mprotect(self._base, length, mmap.PROT_READ) != 0:
            err = ctypes.get_errno()
            raise SharedMemoryError(f"cannot make segment {self.name!r} read-only: {os.strerror(err)}")
        self.sealed = True

    def ref_for(self, tensor: torch.Tensor) -> SegmentRef:
        """The reference of a contiguous tensor that lies inside this segment (e.g. a `view`)."""
        if not tensor.is_contiguous():
            raise SharedMemoryError("only a contiguous tensor can be referenced by offset and shape")
        if tensor.numel() == 0:
            return self.ref(tensor.shape, tensor.dtype, 0)
        offset = tensor.data_ptr() - self._base
        if offset < 0 or offset + tensor.numel() * tensor.element_size() > self.nbytes:
            raise SharedMemoryError(f"the tensor does not lie inside segment {self.name!r}")
        return self.ref(tensor.shape, tensor.dtype, offset)


def create_segment(name: str, label: str, nbytes: int) -> SharedSegment:
    """Create, reserve and map the new segment `name` of `nbytes` bytes.

    A zero-byte segment still gets a one-byte file, since mmap cannot map an empty one.
    The caller (the owner) has recorded `name` before this call, so a failure or a signal
    half-way leaves nothing it would not unlink.
    """
    path = segment_path(name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise SharedMemoryError(f"shared-memory segment {path} already exists") from None
    except FileNotFoundError:
        raise SharedMemoryError(
            f"{SHM_DIR} does not exist: graphtier needs POSIX shared memory (Linux tmpfs)"
        ) from None
    try:
        size = max(nbytes, 1)  # mmap cannot map an empty file; an empty tensor still gets a segment
        os.ftruncate(fd, size)
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            free = shutil.disk_usage(SHM_DIR).free
            raise SharedMemoryError(
                f"cannot reserve {nbytes} bytes for segment {label!r} in {SHM_DIR}: only {free} bytes "
                "free (enlarge /dev/shm, e.g. docker --shm-size, or lower the tier budgets)"
            ) from None
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    os.close(fd)
    return SharedSegment(name, label, nbytes, mapping)
