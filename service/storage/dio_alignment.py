"""What O_DIRECT requires of a file's reads: buffer address and file offset/length alignment.

Linux reports both per file with statx(STATX_DIOALIGN) (since 6.1): `stx_dio_mem_align`
for the buffer's address and `stx_dio_offset_align` for the offset and length. The memory
alignment is often the block device's DMA alignment (512 B on virtio and NVMe), much less
than a page, which is what lets the storage tier read a run of rows straight into the
caller's rows instead of a staging buffer. Where statx or the field is missing (older
kernels, filesystems that do not say), a page in both is assumed: it is what every
filesystem that supports O_DIRECT accepts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

PAGE = 4096
_AT_FDCWD = -100
_STATX_DIOALIGN = 0x2000
_STATX_SIZE = 256  # struct statx is 256 bytes on every architecture
_MASK_AT, _MEM_ALIGN_AT, _OFFSET_ALIGN_AT = 0, 152, 156  # u32 stx_mask, stx_dio_mem_align, stx_dio_offset_align


@dataclass(frozen=True)
class DirectIOAlignment:
    """O_DIRECT alignment of one file: `memory` for buffer addresses, `offset` for file offsets and lengths."""

    memory: int
    offset: int
    reported: bool  # False when the kernel did not say and a page is assumed

    @property
    def block(self) -> int:
        """The unit of a staged request: its file offset and length are multiples of it, and so is its place
        in a page-aligned staging buffer, which keeps the buffer address aligned too."""
        return max(self.memory, self.offset)

    @property
    def valid(self) -> bool:
        """Both are powers of two up to a page (what the staged reads' page-aligned blocks also satisfy)."""
        return usable_alignment(self.memory) and usable_alignment(self.offset)


FALLBACK = DirectIOAlignment(memory=PAGE, offset=PAGE, reported=False)


def usable_alignment(value: int) -> bool:
    """A power of two up to a page."""
    return 0 < value <= PAGE and value & (value - 1) == 0


def direct_io_alignment(path: Path | str) -> DirectIOAlignment:
    """The file's O_DIRECT alignment from statx, or `FALLBACK` (a page) where it is not reported."""
    name = ctypes.util.find_library("c")
    try:
        statx = ctypes.CDLL(name, use_errno=True).statx
    except (OSError, AttributeError, TypeError):
        return FALLBACK
    statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    statx.restype = ctypes.c_int
    buffer = ctypes.create_string_buffer(_STATX_SIZE)
    if statx(_AT_FDCWD, os.fsencode(Path(path)), 0, _STATX_DIOALIGN, buffer) != 0:
        return FALLBACK
    mask, memory, offset = (_u32(buffer.raw, at) for at in (_MASK_AT, _MEM_ALIGN_AT, _OFFSET_ALIGN_AT))
    if not mask & _STATX_DIOALIGN or not (usable_alignment(memory) and usable_alignment(offset)):
        return FALLBACK  # not reported, or 0 (the file cannot be read with O_DIRECT: its open says so)
    return DirectIOAlignment(memory=memory, offset=offset, reported=True)


def _u32(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at : at + 4], sys.byteorder)
