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
    """Draw every level's bits (all r1 of a level, then all r2, as one `torch.rand(E)` each would)."""
    if chunk % 8:
        raise ValueError(f"chunk {chunk} must be a multiple of 8")
    # torch compares a float32 tensor with a Python float in float32; so do these numpy compares
    ab, c_norm, a_norm = (np.float32(t) for t in rmat_thresholds(a, b, c))
    for _level in range(scale):
        src_bits = np.empty(plane_bytes(num_edges), np.uint8)
        for start in range(0, num_edges, chunk):
            r1 = torch.rand(min(chunk, num_edges - start), generator=generator).numpy()
            src_bits[start // 8 : (start + r1.size + 7) // 8] = np.packbits(r1 > ab, bitorder="little")
        src_planes.append(src_bits)
        dst_bits = np.empty_like(src_bits)
        for start in range(0, num_edges, chunk):
            r2 = torch.rand(min(chunk, num_edges - start), generator=generator).numpy()
            packed = src_bits[start // 8 : (start + r2.size + 7) // 8]
            src_bit = np.unpackbits(packed, count=r2.size, bitorder="little").view(np.bool_)
            dst_bit = r2 > np.where(src_bit, c_norm, a_norm)  # = torch.where(src_bit, r2 > c_norm, r2 > a_norm)
            dst_bits[start // 8 : (start + r2.size + 7) // 8] = np.packbits(dst_bit, bitorder="little")
        dst_planes.append(dst_bits)


def assemble_ids(planes: PlaneStore, scale: int, num_edges: int, start: int, count: int) -> torch.Tensor:
    """int64 ids of edges [start, start+count) (start a multiple of 8): bit L is level L's plane."""
    if scale > 32:
        raise ValueError(f"scale {scale} > 32 does not fit the 4-byte assembly")
    size, lo, hi = plane_bytes(num_edges), start // 8, (start + count + 7) // 8
    packed = np.empty((scale, hi - lo), np.uint8)
    for level in range(scale):
        packed[level] = planes.read(level * size + lo, level * size + hi)
    bits = np.unpackbits(packed, axis=1, count=count, bitorder="little")
    grouped = np.zeros((4, count), np.uint8)  # byte g of every id, from levels 8g..8g+7
    for level in range(scale):
        group, shift = divmod(level, 8)
        grouped[group] |= bits[level] << np.uint8(shift)
    return torch.from_numpy(np.ascontiguousarray(grouped.T).view("<u4").reshape(count).astype(np.int64))
