"""Copy an array of a prepared dataset into shared memory, checking the file's checksum on the way.

The daemon must never serve bytes that differ from what `prepare` wrote (a bit flip on disk,
or a same-size overwrite, trains to NaN and "succeeds"). The copy runs in the kernel: each
chunk goes from the file's page cache into the segment's file with `sendfile`, with no mapping
faults and no user-space copy (about half the CPU of reading into the mapping). With a checksum
to check, each chunk is then hashed from the segment's mapping on a worker thread (the hashers
release the GIL) while the next chunk is copied, so what is hashed is what will be served and
the hash overlaps the copy. The checksum is the file's BLAKE3 where the manifest has one (a
quarter of sha256's CPU per byte), else its sha256. The bytes of the file that are not copied
(the storage tier's rows) are hashed from the file. A mismatch raises `PreparedDatasetError`
naming the file; the store fails before any handle to the segments exists, so nothing is served.
"""

from __future__ import annotations

import os
import queue
import threading
from pathlib import Path

import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared.digests import new_digest
from graphtier.service.prepared.manifest import ArrayInfo
from graphtier.service.prepared.npy_io import npy_data_offset

CHUNK_BYTES = 8 << 20  # a copy step: small enough that the hasher reads it soon after the kernel wrote it


class _Hasher:
    """The digest (`digests.new_digest(algorithm)`) of the chunks put to it, in order, on one worker thread."""

    def __init__(self, algorithm: str) -> None:
        self.digest = new_digest(algorithm)
        self._chunks: queue.Queue = queue.Queue(maxsize=8)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="graphtier-checksum", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (chunk := self._chunks.get()) is not None:
            try:
                self.digest.update(chunk)
            except BaseException as exc:  # noqa: BLE001  (re-raised in finish)
                self._error = exc

    def put(self, chunk: memoryview | bytes) -> None:
        self._chunks.put(chunk)

    def finish(self) -> str:
        self._chunks.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.digest.hexdigest()


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
        hasher = _Hasher(algorithm)
    target = memoryview(dest.reshape(-1).view(torch.uint8).numpy()) if dest.numel() else memoryview(b"")
    try:
        offset = npy_data_offset(path)
        with open(path, "rb", buffering=0) as f:
            header = f.read(offset)
            if hasher is not None:
                hasher.put(header)
            done = 0
            if len(target):
                if segment is None:
                    raise ValueError(f"copy_array: {key!r} has {len(target)} bytes to copy but no segment")
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
                            hasher.put(target[done : done + got])  # the segment's bytes: what will be served
                        done += got
            if hasher is not None:
                f.seek(offset + done)
                while block := f.read(CHUNK_BYTES):  # the rows left on storage
                    hasher.put(block)
    except PreparedDatasetError:
        if hasher is not None:
            hasher.finish()
        raise
    except OSError as exc:
        if hasher is not None:
            hasher.finish()
        raise PreparedDatasetError(f"{path}: cannot read {key!r} ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001  numpy's reading of a damaged header raises many kinds
        if hasher is not None:
            hasher.finish()
        raise PreparedDatasetError(f"{path}: the .npy header of {key!r} is damaged ({exc})") from None
    if hasher is None:
        return
    actual = hasher.finish()
    if actual != checksum:
        raise PreparedDatasetError(
            f"{path}: checksum mismatch for {key!r} ({algorithm}: manifest {checksum[:12]}…, file {actual[:12]}…): the "
            "dataset changed or is corrupt since it was prepared; nothing was loaded. Prepare it again, or check it "
            "with `graphtier dataset inspect NAME --verify`"
        )
