"""Fill a preallocated buffer with feature rows from the tiers, counting bytes per source.

`tiered_gather(ids, tiers, out)` copies row ids[i] into out[i] for every i and returns the
exact TrafficCounts: which rows came from the device replica, this GPU's or a peer's share
of the interleaved tier, host memory or storage. The native op does one prefetched copy per
row across the work split's threads (native/cpu/work_split.cpp); the torch fallback
(index_select per tier) gives the same bytes and counts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.gather.tiers import FeatureTiers
from graphtier.service.native_ops import Backend, resolve_backend


def _check_ids(ids: torch.Tensor) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
        raise GraphtierError(f"ids must be a 1-D integer tensor, got {ids!r:.80}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise GraphtierError(f"ids must be an integer tensor, got dtype {ids.dtype}")
    return ids.to(device="cpu", dtype=torch.int64).contiguous()


def _check_out(out: torch.Tensor, tiers: FeatureTiers, n: int) -> None:
    if not isinstance(out, torch.Tensor) or out.device.type != "cpu" or out.dim() < 1 or not out.is_contiguous():
        raise GraphtierError(f"out must be a contiguous CPU tensor with a row dimension, got {out!r:.80}")
    if out.dtype != tiers.dtype or tuple(out.shape[1:]) != tiers.row_shape:
        raise GraphtierError(
            f"out rows are {out.dtype} {tuple(out.shape[1:])} but the feature rows are {tiers.dtype} {tiers.row_shape}"
        )
    if out.shape[0] < n:
        raise GraphtierError(f"out has {out.shape[0]} rows, fewer than the {n} ids to gather")


def _id_range(ids: torch.Tensor) -> tuple[int, int]:
    """(min, max) of non-empty int64 CPU ids, on the calling thread.

    numpy, not torch.aminmax: torch's reduction opens an OpenMP region on every call, and with
    its pool asleep between batches (a producer, a busy machine) waking it costs far more than
    one thread's scan of a batch's ids.
    """
    flat = ids.numpy()
    return int(flat.min()), int(flat.max())


def _out_of_range(ids: torch.Tensor, num_rows: int, pos: int | None = None) -> GraphtierError:
    """The error naming the first id out of range (at `pos` when known)."""
    if pos is None:
        pos = int(((ids < 0) | (ids >= num_rows)).nonzero()[0])
    return GraphtierError(f"id {int(ids[pos])} at position {pos} is out of range [0, {num_rows})")


def count_rows_torch(ids: torch.Tensor, tiers: FeatureTiers) -> list[int]:
    """Rows per source (traffic.SOURCES order) for in-range int64 ids."""
    rep, inter, host, _ = tiers.boundaries
    tier = torch.bucketize(ids, torch.tensor([rep, inter, host], dtype=torch.int64), right=True)
    per_tier = torch.bincount(tier, minlength=4).tolist()
    interleaved = ids[tier == 1]
    local = int(((interleaved - rep) % tiers.num_devices == tiers.device_index).sum())
    return [per_tier[0], local, per_tier[1] - local, per_tier[2], per_tier[3]]


def gather_rows_torch(ids: torch.Tensor, tiers: FeatureTiers, dst: torch.Tensor) -> None:
    """Copy rows `ids` (in range, int64) into `dst` with index_select per memory."""
    host_end = tiers.host_end
    if host_end == tiers.num_rows:
        torch.index_select(tiers.resident, 0, ids, out=dst)
        return
    if host_end == 0:
        torch.index_select(tiers.storage, 0, ids, out=dst)
        return
    # One index_select over the resident rows (storage ids clamped onto a resident row, so
    # every slot is written), then the storage rows overwrite their slots.
    torch.index_select(tiers.resident, 0, ids.clamp(max=host_end - 1), out=dst)
    pos = (ids >= host_end).nonzero().squeeze(1)
    dst[pos] = tiers.storage.index_select(0, ids[pos] - host_end)


def tiered_gather(
    ids: torch.Tensor, tiers: FeatureTiers, out: torch.Tensor, *, backend: Backend = "auto"
) -> TrafficCounts:
    """Write the rows of `ids` (reordered id space) into out[:len(ids)]; return the traffic.

    Raises GraphtierError naming the first id outside [0, num_rows), or a mismatched `out`.
    """
    ids = _check_ids(ids)
    n = ids.numel()
    _check_out(out, tiers, n)
    native = resolve_backend(backend, "tiered_gather") == "native"
    if n and (tiers.storage_reader is not None or not native):
        lo, hi = _id_range(ids)
        if lo < 0 or hi >= tiers.num_rows:
            raise _out_of_range(ids, tiers.num_rows)
        if tiers.storage_reader is not None and hi >= tiers.host_end:
            return _gather_with_reader(ids, tiers, out, backend)
    if native:
        # The op checks every id in its first pass, before it copies a row, and returns the position of
        # the first bad one (`out` untouched) without raising (see native_ops), so the batch is not
        # scanned twice here.
        *rows, first_bad = torch.ops.graphtier.tiered_gather(
            ids, tiers.resident, tiers.storage, list(tiers.boundaries), tiers.num_devices, tiers.device_index, out
        ).tolist()
        if first_bad >= 0:
            raise _out_of_range(ids, tiers.num_rows, first_bad)
    else:
        if n:
            gather_rows_torch(ids, tiers, out[:n])
        rows = count_rows_torch(ids, tiers)
    return TrafficCounts.from_rows(rows, tiers.row_bytes, simulated=tiers.simulated)


def _gather_with_reader(ids: torch.Tensor, tiers: FeatureTiers, out: torch.Tensor, backend: Backend) -> TrafficCounts:
    """The resident rows as usual, then the batch's storage rows in one `StorageReader.read`."""
    assert tiers.storage_reader is not None  # the caller's condition
    return gather_split(ids, tiers, out, tiers.storage_reader.read, backend=backend)


StorageFill = Callable[[np.ndarray, np.ndarray], None]


def gather_split(
    ids: torch.Tensor, tiers: FeatureTiers, out: torch.Tensor, read_storage: StorageFill, *, backend: Backend = "auto"
) -> TrafficCounts:
    """Like `tiered_gather`, but the storage rows come from `read_storage(rows, rows_out)`: `rows`
    storage-relative (id - host_end) in batch order, `rows_out` a numpy array to fill row for row
    (a `StorageReader`'s or the look-ahead window's read). Ids must be in range."""
    ids = _check_ids(ids)
    n, host_end = ids.numel(), tiers.host_end
    _check_out(out, tiers, n)
    pos = (ids >= host_end).nonzero().squeeze(1)
    if host_end > 0 and pos.numel() < n:  # storage ids clamped onto a resident row, then overwritten
        resident_only = dataclasses.replace(tiers, storage=tiers.resident[:0], num_rows=host_end, storage_reader=None)
        tiered_gather(ids.clamp(max=host_end - 1), resident_only, out, backend=backend)
    if pos.numel():
        rows = _storage_rows(tiers, pos.numel())
        read_storage((ids[pos] - host_end).numpy(), rows.numpy())
        out[pos] = rows
    return TrafficCounts.from_rows(count_rows_torch(ids, tiers), tiers.row_bytes, simulated=tiers.simulated)


def _storage_rows(tiers: FeatureTiers, count: int) -> torch.Tensor:
    """Rows for a batch's storage reads: the reader's when there is one, placed so that its direct
    reads of adjacent rows go straight in rather than through its staging buffer."""
    if tiers.storage_reader is None:
        return torch.empty((count, *tiers.row_shape), dtype=tiers.dtype)
    return tiers.storage_reader.empty_rows(count).view(tiers.dtype).view(count, *tiers.row_shape)
