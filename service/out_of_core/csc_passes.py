"""The passes of the out-of-core CSC build over its in-memory key array, native or numpy.

`external_sort.build_csc_external` counts each destination's entries, scatters every edge's
key (`destination * N + source`) into its bucket's region of one key array, sorts each
bucket and compacts it into the row. Each pass here runs as one loop of the native ops
(`native/cpu/csc_build.cpp`) when they are built, else as the numpy calls they replace, with
the same result (tested against each other). The numpy calls allocate temporaries as large as
the chunk or the bucket, which outgrow the caches as the graph doubles; the loops allocate
nothing.
"""

from __future__ import annotations

import numpy as np
import torch

from graphtier.service.native_ops import Backend, resolve_backend
from graphtier.service.out_of_core.spill import group_by_bucket


def _native(backend: Backend) -> bool:
    return resolve_backend(backend, "CSC build") == "native"


def count_entries(counts: np.ndarray, ids: np.ndarray, *, backend: Backend = "auto") -> None:
    """counts[v] += the number of times v occurs in `ids` (int32 or int64, every id < len(counts))."""
    if _native(backend):
        torch.ops.graphtier.count_entries_(torch.from_numpy(counts), torch.from_numpy(np.ascontiguousarray(ids)))
    else:
        counts += np.bincount(ids, minlength=counts.size)


def bucket_of(bucket_starts: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Each column's bucket: the last whose first column in `bucket_starts` (increasing from 0) is <= it."""
    return np.searchsorted(bucket_starts, columns, side="right") - 1


def scatter_keys(
    keys: np.ndarray,
    cursor: np.ndarray,
    limit: np.ndarray,
    owner: torch.Tensor,
    other: torch.Tensor,
    *,
    num_nodes: int,
    relabel: torch.Tensor | None,
    bucket_starts: np.ndarray,
    both_ways: bool,
    backend: Backend = "auto",
) -> None:
    """Append edge i's key `a * N + b` (a, b = owner[i], other[i], through `relabel` when given) to
    the region of `keys` of a's bucket (the last whose first column in `bucket_starts`, increasing
    from 0, is <= a), at its `cursor` (advanced); with `both_ways` also `b * N + a` to b's bucket.
    A bucket's `cursor` never passes its `limit`."""
    if _native(backend):
        torch.ops.graphtier.scatter_csc_keys_(
            torch.from_numpy(keys),
            torch.from_numpy(cursor),
            torch.from_numpy(limit),
            owner.contiguous(),
            other.contiguous(),
            torch.empty(0, dtype=torch.int64) if relabel is None else relabel.contiguous(),
            torch.from_numpy(bucket_starts),
            num_nodes,
            both_ways,
        )
        return
    a, b = (
        ids.to(torch.int64) if relabel is None else relabel[ids.to(torch.int64)].to(torch.int64)
        for ids in (owner, other)
    )
    for column, source in ((a, b), (b, a)) if both_ways else ((a, b),):
        new = (column * num_nodes + source).numpy()
        order, bounds = group_by_bucket(bucket_of(bucket_starts, column.numpy()), cursor.size)
        for k in np.flatnonzero(np.diff(bounds)):
            count = int(bounds[k + 1] - bounds[k])
            if cursor[k] + count > limit[k]:
                raise RuntimeError(f"bucket {k} is full ({limit[k]} entries): more entries than counted")
            keys[cursor[k] : cursor[k] + count] = new[order[bounds[k] : bounds[k + 1]]]
            cursor[k] += count


def compact_keys(
    keys: np.ndarray,
    start: int,
    stop: int,
    dest: int,
    *,
    num_nodes: int,
    first_column: int,
    degree: np.ndarray,
    backend: Backend = "auto",
) -> int:
    """The sorted keys `keys[start:stop]` of columns `first_column ...`, repeats dropped, as sources
    at `keys[dest:]` (`dest <= start`, so the row builds up in front of the buckets not yet
    compacted); adds each column's count to `degree` and returns how many were kept."""
    if dest > start:
        raise ValueError(f"compacting keys {start}..{stop} to {dest} would overwrite keys not yet read")
    if _native(backend):
        return int(
            torch.ops.graphtier.compact_csc_keys_(
                torch.from_numpy(keys), start, stop, dest, num_nodes, first_column, torch.from_numpy(degree)
            )
        )
    bucket = keys[start:stop]
    keep = np.empty(bucket.size, dtype=bool)
    keep[:1] = True
    np.not_equal(bucket[1:], bucket[:-1], out=keep[1:])
    distinct = bucket[keep]
    columns = distinct // num_nodes
    degree += np.bincount(columns - first_column, minlength=degree.size)
    keys[dest : dest + distinct.size] = distinct - columns * num_nodes
    return int(distinct.size)
