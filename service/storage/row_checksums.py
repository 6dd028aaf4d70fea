"""Per-row checksums of the feature matrix: recorded at prepare, checked whenever a storage row is read.

The storage tier's rows are read from `features.npy` at batch time, long after the load checked the
file's BLAKE3; a file overwritten in place during a job would otherwise be trained on. So prepare
records one XXH3-64 per feature row (`feature_checksums.npy`, int64 [N], listed in the manifest and
itself BLAKE3-checked when the daemon loads it), and every read of storage rows (the mapped gather,
`MappedReader`, `StorageReader`, hence the look-ahead window, which verifies each row once when it
reads it into its cache) recomputes the rows' checksums and compares. The block checked is one row:
reads are of rows, so a row-sized block is verified from exactly the bytes read, never more.

XXH3 rather than CRC32 or a torch-native sum: per row through one Python call it costs less than
zlib.crc32 and far less than a vectorised multiply-sum over the same bytes, and it is not linear,
so a changed row collides with its recorded value with probability 2^-64. It guards against
accidental or careless change; a deliberate forger who also rewrites the checksum file is caught
by the manifest's BLAKE3 of that file at load.
"""

from __future__ import annotations

import numpy as np
import xxhash

from graphtier.contract.errors import PreparedDatasetError

CHECKSUM_ARRAY = "feature_checksums"  # the manifest key (and file stem) of the per-row checksums


def checksum_array_for(feature_array: str) -> str | None:
    """The array of per-row checksums of the feature array `feature_array`: `feature_checksums` for
    `features`, `feature_checksums.<type>` for a heterogeneous dataset's `features.<type>`; None for others."""
    if feature_array == "features":
        return CHECKSUM_ARRAY
    if feature_array.startswith("features."):
        return f"{CHECKSUM_ARRAY}.{feature_array.removeprefix('features.')}"
    return None


_hash = xxhash.xxh3_64_intdigest


def row_checksums(rows: np.ndarray) -> np.ndarray:
    """XXH3-64 of each row of `rows` (C-contiguous, any dtype, rows along axis 0), as int64 [n]."""
    data = np.ascontiguousarray(rows).reshape(rows.shape[0], -1).view(np.uint8)
    out = np.fromiter(
        map(_hash, data),  # type: ignore[arg-type]  # an ndarray row is a buffer; numpy's stubs say so for 3.12+ only
        dtype=np.uint64,
        count=data.shape[0],
    )
    return out.view(np.int64)


class RowChecksums:
    """The recorded checksums of the storage tier's rows, and the check of rows read from them."""

    def __init__(self, expected: np.ndarray, *, path: str, first_row: int, offset_bytes: int, row_bytes: int) -> None:
        self.expected = expected  # int64, one per storage row (storage-relative: file row first_row + i)
        self.path = path
        self.first_row = first_row  # the file row of storage row 0
        self.offset_bytes = offset_bytes  # byte offset of storage row 0 in the file
        self.row_bytes = row_bytes

    def verify(self, rows: np.ndarray, data: np.ndarray) -> None:
        """Raise PreparedDatasetError naming the file and the first row whose bytes `data[i]` (read from
        storage row `rows[i]`) differ from what prepare recorded."""
        if rows.size == 0:
            return
        actual = row_checksums(data[: rows.size])
        bad = np.flatnonzero(actual != self.expected[rows])
        if bad.size:
            self._fail(int(rows[bad[0]]), int(bad.size))

    def _fail(self, row: int, count: int) -> None:
        start = self.offset_bytes + row * self.row_bytes
        first = self.first_row + row
        others = f" (and {count - 1} more rows of this read)" if count > 1 else ""
        raise PreparedDatasetError(
            f"{self.path}: block of rows [{first}, {first + 1}) (bytes {start}-{start + self.row_bytes - 1}) does not "
            f"match the checksum recorded when the dataset was prepared{others}: the file changed after it was "
            "prepared; no batch was served from it. Prepare the dataset again"
        )
