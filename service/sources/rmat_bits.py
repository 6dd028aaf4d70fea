"""R-MAT edge ids drawn level by level into packed bit planes, then assembled chunk by chunk.

R-MAT draws two uniforms per edge per bit level, for all edges at once, level after level
(the order Graph500-style generators use, which `rmat_edges` must reproduce draw for draw).
So an edge's id is known only after the last level. Instead of updating two int64 arrays
of all edges at every level (memory-bound, and O(E) resident), each level's bits are packed
into a plane of one bit per edge (E/8 bytes), drawn in chunks; the ids are then assembled
chunk by chunk from the planes. The planes live in memory (`MemoryPlanes`) or in a spill
file (`out_of_core`'s streamed generator passes a file-backed store); the draws, and so the
ids, are the same either way.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

DEFAULT_CHUNK = 1 << 22  # edges per chunk; a multiple of 8 so chunks start on plane bytes
DRAW_BLOCK = 1 << 18  # uniforms drawn and compared at once: 1 MiB of float32, within a core's L2


class PlaneStore(Protocol):
    def append(self, bits: np.ndarray) -> None: ...

    def read(self, start: int, stop: int) -> np.ndarray: ...


class MemoryPlanes:
    """Bit planes held in memory, one after the other (the layout a spill file has)."""

    def __init__(self) -> None:
        self.planes: list[np.ndarray] = []

    def append(self, bits: np.ndarray) -> None:
        self.planes.append(bits)

    def read(self, start: int, stop: int) -> np.ndarray:
        size = self.planes[0].size
        level, offset = divmod(start, size)
        return self.planes[level][offset : offset + stop - start]


def plane_bytes(num_edges: int) -> int:
    return (num_edges + 7) // 8


def rmat_thresholds(a: float, b: float, c: float) -> tuple[float, float, float]:
    """(a+b, c/(1-a-b), a/(a+b)): a source bit is 1 when r1 > a+b; the destination bit compares r2
    with the second value when the source bit is 1, with the third when it is 0."""
    ab = a + b
    return ab, c / (1.0 - ab), a / ab


def draw_bit_planes(
    generator: torch.Generator,
    scale: int,
    num_edges: int,
    src_planes: PlaneStore,
    dst_planes: PlaneStore,
    *,
    a: float,
    b: float,
    c: float,
    chunk: int = DEFAULT_CHUNK,
) -> None:
    """Draw every level's bits (all r1 of a level, then all r2, as one `torch.rand(E)` each would).

    `torch.rand` draws serially from the generator, so drawing a level in blocks gives the same
    numbers as drawing it whole. The blocks are small (`DRAW_BLOCK`), into buffers reused for the
    whole run: the uniforms are compared while still in cache and no page is faulted in afresh.
    """
    if chunk % 8:
        raise ValueError(f"chunk {chunk} must be a multiple of 8")
    # torch compares a float32 tensor with a Python float in float32; so do these numpy compares
    ab, c_norm, a_norm = (np.float32(t) for t in rmat_thresholds(a, b, c))
    block = min(chunk, DRAW_BLOCK)
    uniforms = torch.empty(block)
    r, above, above_other = uniforms.numpy(), np.empty(block, bool), np.empty(block, bool)
    for _level in range(scale):
        src_bits = np.empty(plane_bytes(num_edges), np.uint8)
        for start in range(0, num_edges, block):
            k = min(block, num_edges - start)
            torch.rand(k, generator=generator, out=uniforms[:k])
            np.greater(r[:k], ab, out=above[:k])
            src_bits[start // 8 : (start + k + 7) // 8] = np.packbits(above[:k], bitorder="little")
        src_planes.append(src_bits)
        dst_bits = np.empty_like(src_bits)
        for start in range(0, num_edges, block):
            k = min(block, num_edges - start)
            torch.rand(k, generator=generator, out=uniforms[:k])
            packed = src_bits[start // 8 : (start + k + 7) // 8]
            # the destination bit is r2 > c_norm where the source bit is 1, r2 > a_norm where it is 0:
            # both compares packed, then picked bit by bit with the packed source bits
            above_c = np.packbits(np.greater(r[:k], c_norm, out=above[:k]), bitorder="little")
            above_a = np.packbits(np.greater(r[:k], a_norm, out=above_other[:k]), bitorder="little")
            dst_bits[start // 8 : (start + k + 7) // 8] = (above_c & packed) | (above_a & ~packed)
        dst_planes.append(dst_bits)


# Masks of the three swap steps of an 8x8 bit-matrix transpose in a 64-bit word (Hacker's Delight 7-3)
_SWAPS = tuple(
    (np.uint64(shift), np.uint64(mask))
    for shift, mask in ((7, 0x00AA00AA00AA00AA), (14, 0x0000CCCC0000CCCC), (28, 0x00000000F0F0F0F0))
)


def _transpose_bytes(block: np.ndarray) -> np.ndarray:
    """(n, 8) uint8, row i = byte i of 8 planes -> (n, 8) uint8, row i = those 8 edges' bytes: bit j of
    input byte k becomes bit k of output byte j, for every 8x8 block at once (as one uint64 each)."""
    x = np.ascontiguousarray(block).view(np.uint64).reshape(-1).copy()
    for shift, mask in _SWAPS:
        t = ((x >> shift) ^ x) & mask
        x ^= t ^ (t << shift)
    return x.view(np.uint8).reshape(block.shape)


def assemble_ids(planes: PlaneStore, scale: int, num_edges: int, start: int, count: int) -> torch.Tensor:
    """int64 ids of edges [start, start+count) (start a multiple of 8): bit L is level L's plane.

    Byte g of an id holds levels 8g..8g+7: a plane byte holds one level of 8 edges, so the 8
    planes' bytes of 8 edges form an 8x8 bit matrix whose transpose is those edges' id bytes."""
    if scale > 32:
        raise ValueError(f"scale {scale} > 32 does not fit the 4-byte assembly")
    size, lo, hi = plane_bytes(num_edges), start // 8, (start + count + 7) // 8
    n = hi - lo
    ids = np.zeros((n, 8, 4), np.uint8)  # edge 8i+j's byte g at [i, j, g]: little-endian uint32 ids
    block = np.empty((n, 8), np.uint8)
    for group in range((scale + 7) // 8):
        levels = range(8 * group, min(scale, 8 * group + 8))
        if len(levels) < 8:
            block[:, len(levels) :] = 0
        for k, level in enumerate(levels):
            block[:, k] = planes.read(level * size + lo, level * size + hi)
        ids[:, :, group] = _transpose_bytes(block)
    return torch.from_numpy(ids.reshape(n * 8, 4).view("<u4").reshape(n * 8)[:count].astype(np.int64))
