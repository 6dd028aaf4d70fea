"""Writing `.npy` files with streamed checksums (sha256 and BLAKE3, `digests`), and opening them memory-mapped.

Every file's data starts on a 4 KiB boundary (`npy_header`), so the storage tier's rows,
read with O_DIRECT in whole blocks, do not straddle one more block each than they span.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike

from graphtier.service.prepared.digests import FileDigests, file_digest
from graphtier.service.prepared.direct_writer import DirectFileWriter
from graphtier.service.prepared.manifest import ArrayInfo
from graphtier.service.storage.row_checksums import row_checksums

DATA_ALIGN = 4096  # the data starts on a block boundary, so O_DIRECT reads of whole rows stay aligned


def npy_header(dtype: np.dtype | str, shape: tuple[int, ...]) -> bytes:
    """A version 1.0 `.npy` header for a C-order array, padded so the data starts at a multiple of
    DATA_ALIGN bytes (np.load reads it like any other: the format allows any padding)."""
    raw = io.BytesIO()
    descr = np.lib.format.dtype_to_descr(np.dtype(dtype))
    np.lib.format.write_array_header_1_0(raw, {"descr": descr, "fortran_order": False, "shape": tuple(shape)})
    text = raw.getvalue()[10:].rstrip(b" \n")  # after magic, version and the 2-byte length
    total = -(-(10 + len(text) + 1) // DATA_ALIGN) * DATA_ALIGN
    return raw.getvalue()[:8] + (total - 10).to_bytes(2, "little") + text + b" " * (total - 11 - len(text)) + b"\n"


def write_npy(path: Path, array: torch.Tensor | np.ndarray) -> ArrayInfo:
    """Write `array` as `.npy` at `path`, fsync it, and return its info with the file's sha256."""
    data = array.contiguous().numpy() if isinstance(array, torch.Tensor) else np.ascontiguousarray(array)
    stream = NpyStreamWriter(path, data.shape, data.dtype)
    try:
        stream.write(data)
        return stream.close()
    except BaseException:
        stream.abort()
        raise


def file_sha256(path: Path) -> str:
    return file_digest(path, "sha256")


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


class NpyStreamWriter:
    """Writes one `.npy` file front to back, chunk by chunk, hashing as it goes.

    The header is the one `write_npy` would write for the whole array, so a file streamed in
    chunks is byte-identical to the same array written at once. The bytes go out with direct
    I/O by a writer thread and hashed by two more (`direct_writer`) while the next chunk is computed.
    `close` checks that exactly `shape[0]` rows arrived, fsyncs, and returns the file's `ArrayInfo`.
    With `checksum_rows`, each row's checksum (`row_checksums`) is kept too: `checksums` after `close`.
    """

    def __init__(self, path: Path, shape: tuple[int, ...], dtype: DTypeLike, *, checksum_rows: bool = False) -> None:
        self.path = Path(path)
        self.shape = tuple(int(s) for s in shape)
        if not self.shape:
            raise ValueError(f"{self.path.name}: a .npy stream needs an array of at least one dimension")
        self.dtype = np.dtype(dtype)
        self.rows_written = 0
        self._checksums: list[np.ndarray] | None = [] if checksum_rows else None
        header = npy_header(self.dtype, self.shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._digest = FileDigests()
        self._file = DirectFileWriter(self.path, size_hint=len(header) + self.nbytes, consumers=self._digest.updaters)
        try:
            self._file.write(header)
        except BaseException:
            self._file.abort()
            raise

    def write(self, chunk: torch.Tensor | np.ndarray) -> None:
        data = chunk.contiguous().numpy() if isinstance(chunk, torch.Tensor) else np.ascontiguousarray(chunk)
        if data.dtype != self.dtype or tuple(data.shape[1:]) != self.shape[1:]:
            raise ValueError(
                f"{self.path.name}: chunk {data.dtype} {data.shape} does not fit {self.dtype} {self.shape}"
            )
        if self.rows_written + data.shape[0] > self.shape[0]:
            raise ValueError(f"{self.path.name}: more than the {self.shape[0]} rows announced")
        if data.size:
            self._file.write(data)
            if self._checksums is not None:
                self._checksums.append(row_checksums(data))
        self.rows_written += data.shape[0]

    @property
    def checksums(self) -> np.ndarray | None:
        """The rows' checksums so far (int64 [rows_written]); None unless asked for."""
        if self._checksums is None:
            return None
        return np.concatenate(self._checksums) if self._checksums else np.empty(0, np.int64)

    def close(self) -> ArrayInfo:
        if self.rows_written != self.shape[0]:
            self._file.abort()
            raise ValueError(f"{self.path.name}: {self.rows_written} rows written, {self.shape[0]} announced")
        self._file.close()
        return ArrayInfo(
            file=self.path.name,
            shape=list(self.shape),
            dtype=str(self.dtype),
            nbytes=self.nbytes,
            sha256=self._digest.sha256,
            blake3=self._digest.blake3,
        )

    def abort(self) -> None:
        self._file.abort()
