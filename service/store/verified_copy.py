"""Copy an array of a prepared dataset into shared memory, checking the file's checksum on the way.

The daemon must never serve bytes that differ from what `prepare` wrote (a bit flip on disk,
or a same-size overwrite, trains to NaN and "succeeds"). Without a checksum to check, the copy
runs in the kernel: `sendfile` moves each chunk from the file's page cache into the segment's
file, with no mapping faults and no user-space copy. With one, each chunk is read into one small
buffer that stays in the CPU's cache, hashed there, and written into the segment from that same
buffer: what is hashed is exactly what is served, and the hash reads cached bytes instead of
faulting the segment's pages in through a mapping (which cost about as much again as the hash).
It all stays on the calling thread: a second thread hashing one chunk while the next is copied
overlaps the two where a core is often idle, but where the cores are busy (where a load competes
with jobs) it costs more CPU and more time than hashing on the calling thread.
The checksum is the file's BLAKE3 where the manifest has one (much cheaper than sha256 per
byte), else its sha256. The bytes of the file that are not copied (the storage tier's rows) are
hashed through the same buffer. A mismatch raises `PreparedDatasetError` naming the file (and,
for a feature array, its first row that differs from the per-row checksums prepare recorded); the
store fails before any handle to the segments exists, so nothing is served.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared.digests import Digest, new_digest
from graphtier.service.prepared.manifest import ArrayInfo
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.storage.row_checksums import row_checksums

CHUNK_BYTES = 1 << 20  # one copy step; as the verified copy's buffer it stays in a core's cache from read to write


def copy_array(
    path: Path,
    key: str,
    dest: torch.Tensor,
    segment: tuple[str, int] | None,
    expected: ArrayInfo | None,
    row_checksums_file: Path | None = None,
) -> None:
    """Fill `dest`, which lies in `segment` (its file and the byte offset of `dest` in it; None when
    `dest` is empty), with the first `dest.nbytes` data bytes of the `.npy` file at `path`; with
    `expected`, also check the whole file against it (its BLAKE3, else its sha256).
    PreparedDatasetError on a mismatch, a short file or an unreadable one; `row_checksums_file` (the
    array's recorded per-row checksums) lets a mismatch name the first changed row."""
    nbytes = dest.numel() * dest.element_size()
    if nbytes and segment is None:
        raise ValueError(f"copy_array: {key!r} has {nbytes} bytes to copy but no segment to copy them into")
    try:
        offset = npy_data_offset(path)
        with open(path, "rb", buffering=0) as f:
            if expected is None:
                if segment is not None:
                    _send(f.fileno(), offset, nbytes, segment, path, key)
                return
            algorithm, checksum = ("blake3", expected.blake3) if expected.blake3 else ("sha256", expected.sha256)
            actual = _copy_hashed(f.fileno(), offset, nbytes, segment, new_digest(algorithm), path, key)
    except PreparedDatasetError:
        raise
    except OSError as exc:
        raise PreparedDatasetError(f"{path}: cannot read {key!r} ({exc.strerror or exc})") from None
    except Exception as exc:  # numpy's reading of a damaged header raises many kinds
        raise PreparedDatasetError(f"{path}: the .npy header of {key!r} is damaged ({exc})") from None
    if actual != checksum:
        where = _first_changed_row(path, offset, row_checksums_file) if row_checksums_file is not None else ""
        raise PreparedDatasetError(
            f"{path}: checksum mismatch for {key!r} ({algorithm}: manifest {checksum[:12]}…, file {actual[:12]}…)"
            f"{where}: the dataset changed or is corrupt since it was prepared; nothing was loaded. Prepare it again, "
            "or check it with `graphtier dataset inspect NAME --verify`"
        )


def _first_changed_row(path: Path, offset: int, row_checksums_file: Path) -> str:
    """Where the rows of the feature array in `path` (data at byte `offset`) first differ from the
    per-row checksums recorded in `row_checksums_file`, as a clause of the mismatch error; '' when
    the two files cannot be compared. Runs only after a mismatch, so its cost is no load's."""
    try:
        recorded = np.load(row_checksums_file, mmap_mode="r")
        rows = np.load(path, mmap_mode="r")
        if rows.ndim == 0 or rows.shape[0] != recorded.shape[0]:
            return ""
        row_bytes = rows[:1].nbytes
        per_block = max(1, (16 << 20) // max(row_bytes, 1))
        for start in range(0, rows.shape[0], per_block):
            stop = start + per_block
            changed = np.flatnonzero(row_checksums(rows[start:stop]) != recorded[start:stop])
            if changed.size:
                row = start + int(changed[0])
                first = offset + row * row_bytes
                return f", first at row {row} (bytes {first}-{first + row_bytes - 1})"
    except Exception:  # a clause of an error already being raised: it must not replace it
        return ""
    return ", in no row (every row matches the recorded row checksums: the .npy header, or those, changed)"


def _truncated(path: Path, key: str, done: int, nbytes: int) -> PreparedDatasetError:
    return PreparedDatasetError(f"{path}: truncated: {key!r} ends after {done} of {nbytes} bytes")


def _send(source: int, offset: int, nbytes: int, segment: tuple[str, int], path: Path, key: str) -> None:
    """Copy the `nbytes` data bytes at file offset `offset` of `source` into `segment`, in the kernel."""
    segment_path, dest_offset = segment
    with open(segment_path, "r+b", buffering=0) as out:
        out.seek(dest_offset)
        done = 0
        while done < nbytes:
            got = os.sendfile(out.fileno(), source, offset + done, min(CHUNK_BYTES, nbytes - done))
            if not got:
                raise _truncated(path, key, done, nbytes)
            done += got


def _copy_hashed(
    source: int, offset: int, nbytes: int, segment: tuple[str, int] | None, digest: Digest, path: Path, key: str
) -> str:
    """Hash the whole file `source` with `digest` (header included), and write its `nbytes` data bytes
    at file offset `offset` into `segment` from the buffer each chunk was hashed in; the hex digest."""
    buffer = memoryview(bytearray(CHUNK_BYTES))
    segment_path, dest_offset = segment if segment is not None else (None, 0)
    out = os.open(segment_path, os.O_WRONLY) if segment_path is not None else -1
    try:
        position, served_end = 0, offset + nbytes  # file offsets
        while True:
            step = CHUNK_BYTES if position >= served_end else min(CHUNK_BYTES, served_end - position)
            got = os.preadv(source, [buffer[:step]], position)
            if not got:
                if position < served_end:
                    raise _truncated(path, key, max(position - offset, 0), nbytes)
                return digest.hexdigest()
            chunk = buffer[:got]
            digest.update(chunk)
            if position < served_end and position + got > offset:  # served bytes: into the segment
                first = max(offset - position, 0)
                _write_all(out, chunk[first:], dest_offset + position + first - offset)
            position += got
    finally:
        if out >= 0:
            os.close(out)


def _write_all(fd: int, data: memoryview, at: int) -> None:
    """pwrite all of `data` at offset `at` of `fd`."""
    while data:
        written = os.pwrite(fd, data, at)
        if not written:
            raise OSError(f"wrote nothing at offset {at} of the segment")
        data, at = data[written:], at + written
