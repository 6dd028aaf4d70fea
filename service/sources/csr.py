"""Compressed sparse rows (CSR): a matrix stored as `data`, `indices` and `indptr`, read without scipy.

Planetoid pickles and gnn-benchmark `.npz` archives store their sparse matrices this way. Row `r`
holds the entries `indptr[r]:indptr[r + 1]`: values `data[k]` in columns `indices[k]`. `Csr.checked`
holds the arrays to the rules scipy's `check_format(full_check=True)` applies (same messages), so
a corrupt file is refused with a reason before any index is used; entries past `indptr[-1]` are
ignored, as scipy prunes them. Expansion keeps the stored order and every stored entry (the
edge lists), and densifying sums duplicate entries (what scipy's `toarray` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


def _int_array(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 1:
        raise ValueError("data, indices, and indptr should be 1-D")
    if array.dtype.kind not in "iu":
        raise ValueError(f"{what} array has non-integer dtype ({array.dtype})")
    return array.astype(np.int64, copy=False)


def _shape(value: Any) -> tuple[int, int]:
    try:
        rows, cols = (int(s) for s in value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"shape must be two integers, got {value!r}") from None
    if rows < 0 or cols < 0:
        raise ValueError(f"shape {(rows, cols)} has a negative dimension")
    return rows, cols


@dataclass(frozen=True)
class Csr:
    """A validated CSR matrix: `indptr` has `rows + 1` entries, nondecreasing from 0, and every
    stored column index is in `[0, cols)`."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    @classmethod
    def checked(cls, data: Any, indices: Any, indptr: Any, shape: Any) -> Csr:
        """The matrix these arrays describe; ValueError saying what is inconsistent otherwise."""
        data = np.asarray(data)
        if data.ndim != 1:
            raise ValueError("data, indices, and indptr should be 1-D")
        if data.dtype.kind not in "biufc":
            raise ValueError(f"data array has non-numeric dtype ({data.dtype})")
        indices = _int_array(indices, "indices")
        indptr = _int_array(indptr, "indptr")
        rows, cols = _shape(shape)
        if indptr.size != rows + 1:
            raise ValueError(f"index pointer size {indptr.size} should be {rows + 1}")
        if indptr[0] != 0:
            raise ValueError("index pointer should start with 0")
        if indices.size != data.size:
            raise ValueError("indices and data should have the same size")
        nnz = int(indptr[-1])
        if nnz > indices.size:
            raise ValueError("Last value of index pointer should be less than the size of index and data arrays")
        data, indices = data[:nnz], indices[:nnz]
        if nnz:
            if int(indices.max()) >= cols:
                raise ValueError(f"indices must be < {cols}")
            if int(indices.min()) < 0:
                raise ValueError("indices must be >= 0")
        if rows and int(np.diff(indptr).min()) < 0:
            raise ValueError("indptr must be a non-decreasing sequence")
        return cls(
            data=data.astype(data.dtype.newbyteorder("="), copy=False),
            indices=indices,
            indptr=indptr,
            shape=(rows, cols),
        )

    def rows(self) -> np.ndarray:
        """The row of every stored entry, in stored order (int64): with `indices`, the COO form."""
        return np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.indptr))

    def dense(self) -> np.ndarray:
        """The matrix as a dense array of `data`'s dtype, duplicate entries summed."""
        rows = self.rows()
        try:
            dense = np.zeros(self.shape, dtype=self.data.dtype)
        except (ValueError, MemoryError) as exc:
            raise ValueError(
                f"a dense {self.shape[0]} x {self.shape[1]} {self.data.dtype} array cannot be made ({exc})"
            ) from None
        flat = rows * self.shape[1] + self.indices
        if flat.size < 2 or bool((np.diff(flat) > 0).all()):  # each entry its own cell: no sums needed
            dense[rows, self.indices] = self.data
        else:
            np.add.at(dense, (rows, self.indices), self.data)
        return dense
