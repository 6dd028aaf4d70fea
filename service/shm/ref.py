"""References to tensors inside shared-memory segments, and attaching them without a copy.

A `SegmentRef` is what the daemon hands to producers and trainer ranks (over gRPC, as
JSON): segment name, byte offset, shape and dtype. `attach_tensor` maps the segment and
returns a torch view of those bytes; by default the mapping is `PROT_READ`, so a consumer
that writes by mistake faults (SIGSEGV) instead of silently corrupting the daemon's copy.
"""

from __future__ import annotations

import math
import mmap
import os
import warnings
from collections.abc import Sequence

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.shm.naming import SegmentName, segment_path

_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
    )
}
SUPPORTED_DTYPES: tuple[str, ...] = tuple(_DTYPES)


def dtype_itemsize(name: str) -> int:
    """Bytes per element of the wire dtype `name`."""
    return _DTYPES[dtype_name(name)].itemsize


def dtype_name(dtype: torch.dtype | str) -> str:
    """The wire name of a dtype ('float32', 'int64', ...); SharedMemoryError if unsupported."""
    name = dtype.removeprefix("torch.") if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise SharedMemoryError(f"dtype {dtype!r} cannot live in a shared segment; supported: {', '.join(_DTYPES)}")
    return name


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a wire name produced by `dtype_name`."""
    return _DTYPES[dtype_name(name)]


class TensorPlacement(BaseModel):
    """`shape`/`dtype` elements, C-contiguous, from byte `offset` of some memory: what every
    reference to a tensor in shared memory says, whatever names the memory (`SegmentRef`, `Region`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    offset: int = Field(ge=0, description="Byte offset of the first element; a multiple of the element size.")
    shape: tuple[int, ...] = Field(description="Tensor shape; the tensor is C-contiguous.")
    dtype: str = Field(description="Element type by torch name without 'torch.', e.g. 'float32'.")

    @field_validator("shape")
    @classmethod
    def _check_shape(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        if any(d < 0 for d in shape):
            raise ValueError(f"shape {shape} has a negative dimension")
        return shape

    @field_validator("dtype")
    @classmethod
    def _check_dtype(cls, dtype: str) -> str:
        if dtype not in _DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
        return dtype

    @model_validator(mode="after")
    def _check_alignment(self) -> TensorPlacement:
        if self.offset % self.itemsize:
            raise ValueError(f"offset {self.offset} is not a multiple of the {self.dtype} size {self.itemsize}")
        return self

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def itemsize(self) -> int:
        return _DTYPES[self.dtype].itemsize

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    @property
    def end(self) -> int:
        """The byte just past the last element."""
        return self.offset + self.nbytes


class SegmentRef(TensorPlacement):
    """Where a tensor lives: `shape`/`dtype` elements at byte `offset` of segment `name`."""

    name: str = Field(description="Segment file name under /dev/shm (graphtier.<pid>.<start>.<token>.<label>).")

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        # Refs arrive over the network: only a well-formed segment name may become a path.
        if SegmentName.parse(name) is None:
            raise ValueError(f"{name!r} is not a graphtier segment name")
        return name


def view_of_mapping(
    mapping: mmap.mmap, shape: Sequence[int], dtype: torch.dtype, offset: int, *, read_only: bool
) -> torch.Tensor:
    """A zero-copy tensor over `mapping`; the tensor keeps the mapping alive while it lives."""
    numel = math.prod(shape)
    if numel == 0:
        return torch.empty(tuple(shape), dtype=dtype)
    if read_only:
        # torch has no read-only tensors and warns about it; the PROT_READ mapping is the guard.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            flat = torch.frombuffer(mapping, dtype=dtype, count=numel, offset=offset)
    else:
        flat = torch.frombuffer(mapping, dtype=dtype, count=numel, offset=offset)
    return flat.view(tuple(shape))


def map_segment(name: str, *, writable: bool = False) -> tuple[mmap.mmap, int]:
    """Map all of segment `name` (read-only unless `writable`); the mapping and the file's size.
    SharedMemoryError when the segment is gone (its owner closed it or exited) or refuses the mode."""
    path = segment_path(name)
    try:
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
    except FileNotFoundError:
        raise SharedMemoryError(
            f"shared-memory segment {name!r} does not exist ({path}): its owner has gone "
            "(closed the segment or exited); ask the daemon for fresh references"
        ) from None
    except PermissionError as exc:
        mode = "read-write" if writable else "read-only"
        raise SharedMemoryError(f"cannot open shared-memory segment {path} {mode}: {exc.strerror}") from None
    try:
        return map_fd(fd, writable=writable), os.fstat(fd).st_size
    finally:
        os.close(fd)


def map_fd(fd: int, *, writable: bool) -> mmap.mmap:
    """Map the whole shared file open as `fd` (the caller keeps and closes `fd`)."""
    prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    return mmap.mmap(fd, os.fstat(fd).st_size, flags=mmap.MAP_SHARED, prot=prot)


def check_span(name: str, size: int, offset: int, nbytes: int, shape: Sequence[int], dtype: str) -> None:
    """SharedMemoryError unless bytes [offset, offset + nbytes) lie in the `size` bytes of segment `name`."""
    end = offset + nbytes
    if end > size:
        raise SharedMemoryError(
            f"shared-memory segment {name!r} holds {size} bytes, but the reference needs "
            f"bytes [{offset}, {end}) for shape {list(shape)} of {dtype} ({nbytes} bytes at offset {offset})"
        )


def attach_tensor(ref: SegmentRef, *, writable: bool = False) -> torch.Tensor:
    """Map the segment `ref` names and return its tensor without copying.

    The mapping is read-only unless `writable`; it is released when the returned tensor
    (and every view of it) is garbage. Raises SharedMemoryError when the segment is gone
    (its owner closed or exited) or is too small for `ref`.
    """
    mapping, size = map_segment(ref.name, writable=writable)
    check_span(ref.name, size, ref.offset, ref.nbytes, ref.shape, ref.dtype)
    if ref.numel == 0:
        return torch.empty(ref.shape, dtype=ref.torch_dtype)
    return view_of_mapping(mapping, ref.shape, ref.torch_dtype, ref.offset, read_only=not writable)
