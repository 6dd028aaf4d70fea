"""Buffers whose pages are faulted in front to back before rows land in them at random positions.

Rows placed by a permutation touch a fresh buffer's pages in random order, which costs several
times what faulting them in order does; on a VM whose host hands memory back lazily, the first
touch of each page is itself slow. `PrefaultedBuffer` asks the kernel to populate the pages
(`MADV_POPULATE_WRITE`, Linux 5.14: the faults without the writes, the contents untouched) a
piece at a time from a thread, while the caller already computes and places rows, so the faults
overlap the work instead of preceding it. Where the kernel lacks the call the buffer is filled
front to back before it is returned.
"""

from __future__ import annotations

import ctypes
import mmap
import threading
from collections.abc import Callable

import numpy as np
from numpy.typing import DTypeLike

MADV_POPULATE_WRITE = 23  # <linux/mman.h>, since Linux 5.14
STEP_BYTES = 32 << 20  # populated per call: the thread can be stopped between two


def _load_madvise() -> Callable[[int, int, int], int] | None:
    try:
        function = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_madvise = _load_madvise()


class PrefaultedBuffer:
    """An uninitialised C-order array of `shape` and `dtype` in a mapping of its own.

    With `background=True` its pages are populated by a thread while the caller writes (call
    `close` when done with the array or on an error, to stop and join it); else before this
    returns. Either way the contents are what the caller writes; unwritten bytes are zeros.
    """

    def __init__(self, shape: tuple[int, ...], dtype: DTypeLike, *, background: bool = False) -> None:
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self._map = mmap.mmap(-1, nbytes) if nbytes else None
        self.array = np.frombuffer(self._map, dtype).reshape(shape) if self._map else np.empty(shape, dtype)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if not nbytes:
            return
        address = self.array.ctypes.data
        if not self._populate(address, min(STEP_BYTES, nbytes)):  # the kernel cannot: fill in order instead
            self.array.reshape(-1).view(np.uint8).fill(0)
            return
        rest = (address + STEP_BYTES, nbytes - STEP_BYTES)
        if rest[1] <= 0:
            return
        if background:
            self._thread = threading.Thread(
                target=self._populate_all, args=rest, name="graphtier-prefault", daemon=True
            )
            self._thread.start()
        else:
            self._populate_all(*rest)

    def _populate(self, address: int, length: int) -> bool:
        return _madvise is not None and _madvise(address, length, MADV_POPULATE_WRITE) == 0

    def _populate_all(self, address: int, length: int) -> None:
        # holds `self` (so the mapping) until done; a refusal midway leaves the rest to ordinary faults
        for offset in range(0, length, STEP_BYTES):
            if self._stop.is_set() or not self._populate(address + offset, min(STEP_BYTES, length - offset)):
                return

    def close(self) -> None:
        """Stop populating (the array stays usable) and join the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
