"""Copy an array of a prepared dataset into shared memory, checking the file's checksum on the way.

The daemon must never serve bytes that differ from what `prepare` wrote (a bit flip on disk,
or a same-size overwrite, trains to NaN and "succeeds"). The copy runs in the kernel: each
chunk goes from the file's page cache into the segment's file with `sendfile`, with no mapping
faults and no user-space copy (about half the CPU of reading into the mapping). With a checksum
to check, each chunk is hashed from the segment's mapping right after it is copied, while it is
still in the CPU's cache: what is hashed is what will be served, and on a machine whose cores
are busy (where a load competes with jobs) this costs less CPU, and less time, than handing
chunks to a second thread (measured with `tests/bench/bench_load_verify.py`). The checksum is
the file's BLAKE3 where the manifest has one (a quarter of sha256's CPU per byte), else its
sha256. The bytes of the file that are not copied (the storage tier's rows) are hashed from the
file. A mismatch raises `PreparedDatasetError` naming the file; the store fails before any handle
to the segments exists, so nothing is served.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared.digests import new_digest
from graphtier.service.prepared.manifest import ArrayInfo
from graphtier.service.prepared.npy_io import npy_data_offset

CHUNK_BYTES = 1 << 20  # a copy step: small enough to be hashed from the cache the kernel just wrote it into


def copy_array(
    path: Path, key: str, dest: torch.Tensor, segment: tuple[str, int] | None, expected: ArrayInfo | None
) -> None:
    """Fill `dest`, which lies in `segment` (its file and the byte offset of `dest` in it; None when
    `dest` is empty), with the first `dest.nbytes` data bytes of the `.npy` file at `path`; with
    `expected`, also check the whole file against it (its BLAKE3, else its sha256).
    PreparedDatasetError on a mismatch, a short file or an unreadable one."""
    hasher = None
    if expected is not None:
        algorithm, checksum = ("blake3", expected.blake3) if expected.blake3 else ("sha256", expected.sha256)
        hasher = new_digest(algorithm)
    target = memoryview(dest.reshape(-1).view(torch.uint8).numpy()) if dest.numel() else memoryview(b"")
    if len(target) and segment is None:
        raise ValueError(f"copy_array: {key!r} has {len(target)} bytes to copy but no segment to copy them into")
    try:
        offset = npy_data_offset(path)
        with open(path, "rb", buffering=0) as f:
            header = f.read(offset)
            if hasher is not None:
                hasher.update(header)
            done = 0
            if segment is not None:
                segment_path, dest_offset = segment
                with open(segment_path, "r+b", buffering=0) as out:
                    out.seek(dest_offset)
                    while done < len(target):
                        step = min(CHUNK_BYTES, len(target) - done)
                        got = os.sendfile(out.fileno(), f.fileno(), offset + done, step)
                        if not got:
                            raise PreparedDatasetError(
                                f"{path}: truncated: {key!r} ends after {done} of {len(target)} bytes"
                            )
                        if hasher is not None:
                            hasher.update(target[done : done + got])  # the segment's bytes: what will be served
                        done += got
            if hasher is not None:
                f.seek(offset + done)
                while block := f.read(CHUNK_BYTES):  # the rows left on storage
                    hasher.update(block)
    except PreparedDatasetError:
        raise
    except OSError as exc:
        raise PreparedDatasetError(f"{path}: cannot read {key!r} ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001  numpy's reading of a damaged header raises many kinds
        raise PreparedDatasetError(f"{path}: the .npy header of {key!r} is damaged ({exc})") from None
    if hasher is None:
        return
    actual = hasher.hexdigest()
    if actual != checksum:
        raise PreparedDatasetError(
            f"{path}: checksum mismatch for {key!r} ({algorithm}: manifest {checksum[:12]}…, file {actual[:12]}…): the "
            "dataset changed or is corrupt since it was prepared; nothing was loaded. Prepare it again, or check it "
            "with `graphtier dataset inspect NAME --verify`"
        )
