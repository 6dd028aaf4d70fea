"""Writing `.npy` files with a streamed sha256, and opening them memory-mapped."""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from graphtier.service.prepared.manifest import ArrayInfo

_CHUNK = 64 << 20


def write_npy(path: Path, array: torch.Tensor | np.ndarray) -> ArrayInfo:
    """Write `array` as `.npy` at `path`, fsync it, and return its info with the file's sha256."""
    data = array.contiguous().numpy() if isinstance(array, torch.Tensor) else np.ascontiguousarray(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(data))
    digest = hashlib.sha256(header.getvalue())
    flat = data.reshape(-1).view(np.uint8) if data.size else np.empty(0, np.uint8)
    with open(path, "wb") as f:
        f.write(header.getvalue())
        for start in range(0, flat.size, _CHUNK):
            chunk = flat[start : start + _CHUNK]
            digest.update(chunk)
            f.write(chunk.data)
        f.flush()
        os.fsync(f.fileno())
    return ArrayInfo(
        file=path.name, shape=list(data.shape), dtype=str(data.dtype), nbytes=int(data.nbytes), sha256=digest.hexdigest()
    )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def open_npy(path: Path) -> tuple[torch.Tensor, np.memmap]:
    """A read-only, zero-copy tensor over a `.npy` file (writes to it fault)."""
    array = np.load(path, mmap_mode="r", allow_pickle=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable array": intended, it is read-only
        tensor = torch.from_numpy(array) if array.size else torch.from_numpy(np.array(array))
    return tensor, array


def npy_data_offset(path: Path) -> int:
    """Byte offset of the array data inside a `.npy` file (for mapping a row range)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        read_header(f)
        return f.tell()


def write_npy_rows(path: Path, source: torch.Tensor, order: torch.Tensor, *, rows_per_chunk: int = 1 << 16) -> ArrayInfo:
    """Write `source[order]` as `.npy` without materialising it: gather and write chunk by chunk."""
    num_rows = order.numel()
    shape = (num_rows, *source.shape[1:])
    descr = np.lib.format.dtype_to_descr(source.numpy().dtype)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": descr, "fortran_order": False, "shape": shape})
    digest = hashlib.sha256(header.getvalue())
    with open(path, "wb") as f:
        f.write(header.getvalue())
        for start in range(0, num_rows, rows_per_chunk):
            chunk = source.index_select(0, order[start : start + rows_per_chunk]).numpy().reshape(-1).view(np.uint8)
            digest.update(chunk)
            f.write(chunk.data)
        f.flush()
        os.fsync(f.fileno())
    nbytes = num_rows * int(np.prod(shape[1:], dtype=np.int64)) * source.element_size()
    return ArrayInfo(file=path.name, shape=list(shape), dtype=str(source.numpy().dtype), nbytes=nbytes, sha256=digest.hexdigest())
