"""Spill files of the out-of-core path: raw arrays on disk, and buckets of records.

They live in a `spill/` folder inside the dataset's temporary directory, so an
interrupted or crashed preparation leaves nothing behind that the dataset writer does not
already clean up (see `catalog.DatasetWriter`). Reads and writes are positioned system
calls into buffers the caller owns, not long-lived memory maps: mapped pages count as the
process's resident memory for as long as they stay mapped, a read into a chunk-sized
buffer costs exactly that buffer.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike


def as_numpy(array: torch.Tensor | np.ndarray) -> np.ndarray:
    return array.contiguous().numpy() if isinstance(array, torch.Tensor) else np.ascontiguousarray(array)


def _bytes_of(array: np.ndarray) -> memoryview:
    return array.reshape(-1).view(np.uint8).data if array.size else memoryview(b"")


def pread_into(fd: int, out: np.ndarray, offset: int, *, what: str) -> np.ndarray:
    view, done = _bytes_of(out), 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got == 0:
            raise OSError(f"{what}: short read at byte {offset + done} (file shorter than expected)")
        done += got
    return out


def pwrite_all(fd: int, data: np.ndarray, offset: int) -> None:
    view, done = _bytes_of(data), 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


class SpillArray:
    """A headerless array file of rows of `row_shape` x `dtype`: appended, written at a row, read by range."""

    def __init__(self, path: Path, dtype: DTypeLike, row_shape: tuple[int, ...] = ()) -> None:
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.row_shape = tuple(row_shape)
        self.row_bytes = self.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        self.num_rows = 0
        self.deleted = False
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)

    @property
    def fd(self) -> int:
        if self.deleted:
            raise ValueError(f"{self.path.name}: spill file already deleted")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        return self._fd

    def close(self) -> None:
        """Give the descriptor back (many buckets at once would exhaust them); the file stays."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def nbytes(self) -> int:
        return self.num_rows * self.row_bytes

    def _check(self, data: torch.Tensor | np.ndarray) -> np.ndarray:
        data = as_numpy(data)
        if data.dtype != self.dtype:
            data = data.astype(self.dtype)
        if tuple(data.shape[1:]) != self.row_shape:
            raise ValueError(f"{self.path.name}: rows of shape {data.shape[1:]}, expected {self.row_shape}")
        return data

    def append(self, data: torch.Tensor | np.ndarray) -> None:
        data = self._check(data)
        pwrite_all(self.fd, data, self.nbytes)
        self.num_rows += data.shape[0]

    def write_at(self, start: int, data: torch.Tensor | np.ndarray) -> None:
        data = self._check(data)
        pwrite_all(self.fd, data, start * self.row_bytes)
        self.num_rows = max(self.num_rows, start + data.shape[0])

    def read(self, start: int, stop: int, buffer: np.ndarray | None = None) -> np.ndarray:
        """Rows [start, stop), into the front of `buffer` when it is given and large enough (a
        caller reading range after range reuses one buffer instead of faulting in fresh pages)."""
        stop = min(stop, self.num_rows)
        count = max(0, stop - start)
        if buffer is not None and buffer.shape[0] >= count:
            out = buffer[:count]
        else:
            out = np.empty((count, *self.row_shape), dtype=self.dtype)
        return pread_into(self.fd, out, start * self.row_bytes, what=str(self.path))

    def chunks(self, rows_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, self.num_rows, max(1, rows_per_chunk)):
            yield start, self.read(start, start + rows_per_chunk)

    def delete(self) -> None:
        self.close()
        if not self.deleted:
            self.deleted = True
            self.path.unlink(missing_ok=True)


class MemoryArray:
    """`SpillArray`'s interface over memory, for what the budget lets stay there.

    Preallocated to `capacity` rows: pages never written are never resident, so a capacity
    above what is finally appended costs address space, not memory. `read` returns views.
    """

    def __init__(self, dtype: DTypeLike, row_shape: tuple[int, ...] = (), *, capacity: int) -> None:
        self.dtype, self.row_shape = np.dtype(dtype), tuple(row_shape)
        self.data = np.empty((capacity, *self.row_shape), self.dtype)
        self.num_rows = 0

    @classmethod
    def holding(cls, data: np.ndarray) -> MemoryArray:
        """The rows of `data`, not copied (an array built in place by its producer)."""
        array = cls(data.dtype, data.shape[1:], capacity=0)
        array.data, array.num_rows = data, data.shape[0]
        return array

    @property
    def nbytes(self) -> int:
        return self.num_rows * self.data.itemsize * int(np.prod(self.row_shape, dtype=np.int64))

    def append(self, data: torch.Tensor | np.ndarray) -> None:
        data = as_numpy(data)
        self.data[self.num_rows : self.num_rows + data.shape[0]] = data
        self.num_rows += data.shape[0]

    def read(self, start: int, stop: int, buffer: np.ndarray | None = None) -> np.ndarray:
        """A view of rows [start, stop) (`buffer` is not needed: nothing is copied)."""
        return self.data[start : min(stop, self.num_rows)]

    def chunks(self, rows_per_chunk: int) -> Iterator[tuple[int, np.ndarray]]:
        for start in range(0, self.num_rows, max(1, rows_per_chunk)):
            yield start, self.read(start, start + rows_per_chunk)

    def delete(self) -> None:
        self.data = np.empty((0, *self.row_shape), self.dtype)
        self.num_rows = 0


def new_array(
    path: Path, dtype: DTypeLike, row_shape: tuple[int, ...] = (), *, capacity: int, in_memory: bool
) -> SpillArray | MemoryArray:
    """An array to append to: in memory when the caller's budget allows it, else a spill file at `path`."""
    return MemoryArray(dtype, row_shape, capacity=capacity) if in_memory else SpillArray(path, dtype, row_shape)


def group_by_bucket(bucket: np.ndarray, num_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): `order[bounds[b]:bounds[b + 1]]` are the positions i with `bucket[i] == b`, in order."""
    small = np.uint8 if num_buckets <= 256 else np.uint16 if num_buckets <= 65536 else np.int64
    bucket = bucket.astype(small, copy=False)
    order = np.argsort(bucket, kind="stable")  # a radix sort for 8- and 16-bit keys: O(n)
    return order, np.searchsorted(bucket[order], np.arange(num_buckets + 1), side="left")


class BucketSpill:
    """`num_buckets` groups of records with named fields, appended chunk by chunk, read back one group at a time."""

    MAX_OPEN = 128  # descriptors held open at once; beyond that each append reopens its file

    def __init__(
        self, directory: Path, name: str, num_buckets: int, fields: Mapping[str, tuple[DTypeLike, tuple[int, ...]]]
    ):
        self.num_buckets = num_buckets
        self.fields = fields
        self.files: list[dict[str, SpillArray]] = []
        self._reopen = num_buckets * len(fields) > self.MAX_OPEN
        for b in range(num_buckets):
            group = {
                f: SpillArray(Path(directory) / f"{name}.{b}.{f}", dtype, shape) for f, (dtype, shape) in fields.items()
            }
            if self._reopen:
                for spill in group.values():
                    spill.close()
            self.files.append(group)
        self.bytes_written = 0

    def add(self, bucket: np.ndarray, **values: torch.Tensor | np.ndarray) -> None:
        """Append record i of `values` to group `bucket[i]`."""
        order, bounds = group_by_bucket(as_numpy(bucket), self.num_buckets)
        for field, data in values.items():
            grouped = np.take(as_numpy(data), order, axis=0)
            for b in np.flatnonzero(np.diff(bounds)).tolist():
                self._append(b, field, grouped[bounds[b] : bounds[b + 1]])

    def _append(self, b: int, field: str, records: np.ndarray) -> None:
        if records.shape[0] == 0:
            return
        spill = self.files[b][field]
        spill.append(records)
        if self._reopen:
            spill.close()
        self.bytes_written += records.nbytes

    def take(self, b: int) -> dict[str, np.ndarray]:
        """Every record of group `b`, whose files are then deleted."""
        out = {}
        for field, spill in self.files[b].items():
            out[field] = spill.read(0, spill.num_rows)
            spill.delete()
        return out

    def delete(self) -> None:
        for group in self.files:
            for spill in group.values():
                spill.delete()
