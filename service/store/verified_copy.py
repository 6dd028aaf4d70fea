"""Copy an array of a prepared dataset into shared memory while checking the file's checksum.

The daemon must never serve bytes that differ from what `prepare` wrote (a bit flip on disk,
or a same-size overwrite, trains to NaN and "succeeds"). Hashing is streamed alongside the
copy: each chunk is copied into the segment, then hashed from the segment on a worker thread
(the hashers release the GIL) while the next chunk is copied. The checksum is the file's BLAKE3
where the manifest has one (a quarter of sha256's CPU per byte: on a busy 2-core machine the
copy and the hash compete for the same cores, so the cheaper hash is what keeps the check
nearly free), else its sha256. The bytes of the file that are not copied (the storage tier's
rows) are hashed from the file. A mismatch raises `PreparedDatasetError` naming the file;
nothing has been served.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import torch

from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared.digests import new_digest
from graphtier.service.prepared.manifest import ArrayInfo
from graphtier.service.prepared.npy_io import npy_data_offset

CHUNK_BYTES = 32 << 20


class _Hasher:
    """The digest (`digests.new_digest(algorithm)`) of the chunks put to it, in order, on one worker thread."""

    def __init__(self, algorithm: str) -> None:
        self.digest = new_digest(algorithm)
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


def copy_verified(path: Path, key: str, expected: ArrayInfo, dest: torch.Tensor) -> None:
    """Fill `dest` with the first `dest.nbytes` data bytes of the `.npy` file at `path` and check the
    whole file against `expected` (its BLAKE3, else its sha256); PreparedDatasetError on a mismatch
    or an unreadable file.

    The bytes are read straight into the segment (`readinto`: one kernel copy from the page cache,
    no mapping faults and no thread pool per chunk), and each chunk is hashed from the segment on
    the hasher's thread while the next one is read, so what is hashed is what will be served.
    """
    algorithm, checksum = ("blake3", expected.blake3) if expected.blake3 else ("sha256", expected.sha256)
    hasher = _Hasher(algorithm)
    try:
        offset = npy_data_offset(path)
        with open(path, "rb", buffering=0) as f:
            hasher.put(f.read(offset))
            target = memoryview(dest.reshape(-1).view(torch.uint8).numpy()) if dest.numel() else memoryview(b"")
            done = 0
            while done < len(target):
                got = f.readinto(target[done : done + CHUNK_BYTES])
                if not got:
                    raise PreparedDatasetError(f"{path}: truncated: {key!r} ends after {done} of {len(target)} bytes")
                hasher.put(target[done : done + got])
                done += got
            while block := f.read(CHUNK_BYTES):  # the rows left on storage
                hasher.put(block)
    except PreparedDatasetError:
        hasher.finish()
        raise
    except OSError as exc:
        hasher.finish()
        raise PreparedDatasetError(f"{path}: cannot read {key!r} ({exc.strerror or exc})") from None
    except Exception as exc:  # noqa: BLE001  numpy's reading of a damaged header raises many kinds
        hasher.finish()
        raise PreparedDatasetError(f"{path}: the .npy header of {key!r} is damaged ({exc})") from None
    actual = hasher.finish()
    if actual != checksum:
        raise PreparedDatasetError(
            f"{path}: checksum mismatch for {key!r} ({algorithm}: manifest {checksum[:12]}…, file {actual[:12]}…): the "
            "dataset changed or is corrupt since it was prepared; nothing was loaded. Prepare it again, or check it "
            "with `graphtier dataset inspect NAME --verify`"
        )
