"""Copy an array of a prepared dataset into shared memory while checking the file's sha256.

The daemon must never serve bytes that differ from what `prepare` wrote (a bit flip on disk,
or a same-size overwrite, trains to NaN and "succeeds"). Hashing is streamed alongside the
copy: each chunk is copied into the segment, then hashed from the segment on a worker thread
(hashlib releases the GIL) while the next chunk is copied, so the check costs little more than
the copy. The bytes of the file that are not copied (the storage tier's rows) are hashed from
the file. A mismatch raises `PreparedDatasetError` naming the file; nothing has been served.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from pathlib import Path

import torch

from graphtier.service.errors import PreparedDatasetError
from graphtier.service.prepared.npy_io import npy_data_offset

CHUNK_BYTES = 32 << 20


class _Hasher:
    """sha256 of the chunks put to it, in order, on one worker thread."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self._chunks: queue.Queue = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="graphtier-sha256", daemon=True)
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


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.reshape(-1).view(torch.uint8).numpy())


def copy_verified(path: Path, key: str, expected_sha256: str, source: torch.Tensor, dest: torch.Tensor) -> None:
    """Copy source[:len(dest)] (the array stored in `path`) into `dest` and check the whole
    file against `expected_sha256`; PreparedDatasetError on a mismatch or an unreadable file."""
    hasher = _Hasher()
    try:
        offset = npy_data_offset(path)
        with open(path, "rb") as f:
            hasher.put(f.read(offset))
            src = source.reshape(-1).view(torch.uint8) if source.numel() else source.new_empty(0, dtype=torch.uint8)
            dst = dest.reshape(-1).view(torch.uint8) if dest.numel() else dest.new_empty(0, dtype=torch.uint8)
            for first in range(0, dst.numel(), CHUNK_BYTES):
                last = min(first + CHUNK_BYTES, dst.numel())
                dst[first:last].copy_(src[first:last])
                hasher.put(_bytes_of(dst[first:last]))
            f.seek(offset + dst.numel())
            while block := f.read(CHUNK_BYTES):  # the rows left on storage
                hasher.put(block)
    except OSError as exc:
        hasher.finish()
        raise PreparedDatasetError(f"{path}: cannot read {key!r} ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001  numpy's reading of a damaged header raises many kinds
        hasher.finish()
        raise PreparedDatasetError(f"{path}: the .npy header of {key!r} is damaged ({exc})") from None
    actual = hasher.finish()
    if actual != expected_sha256:
        raise PreparedDatasetError(
            f"{path}: checksum mismatch for {key!r} (manifest {expected_sha256[:12]}…, file {actual[:12]}…): the "
            "dataset changed or is corrupt since it was prepared; nothing was loaded. Prepare it again, or check it "
            "with `graphtier dataset inspect NAME --verify`"
        )
