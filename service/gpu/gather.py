"""The tiered gather on the GPU: one kernel launch per batch over a pointer table.

`CudaGather(tiers).gather(ids, out)` writes row ids[i] into out[i] (GPU memory) from
wherever the row lives: this GPU's replica, a local or peer share of the interleaved tier,
registered host memory read in place (zero-copy over PCIe), or storage rows staged through
a pinned buffer. The ids are sorted on the GPU first (host rows in address order, each tier
a contiguous run) and the kernel restores the caller's order. The result is bit-identical to
the CPU `tiered_gather`, and so are the `TrafficCounts`, except that `simulated` is False:
the device bytes really came from device memory.

A batch is one launch that never waits for the GPU. Ids from the CPU are checked and counted
on the host and reach the GPU through a pinned buffer; ids already on the GPU (a GPU sampler's
output) go through `gather_device`, which reads nothing back unless the plan has a storage tier
(those ids must reach the host to be staged). Either way the kernel adds the rows it read per
source to device counters, read back once per reporting interval by `take_counts`. The grid
is capped at `GATHER_MAX_THREADS` threads in flight by default (see `gather_grid`).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.gpu.runtime import CudaError

if TYPE_CHECKING:
    from graphtier.service.storage.dio_alignment import DirectIOAlignment

GATHER_THREADS = 512  # threads per block
GATHER_MAX_THREADS = 10_240
"""Default cap on the threads reading host memory (the host tier zero-copy over PCIe, the staged
storage rows). Those reads saturate the link well below a full grid (GraphBolt caps its UVA
gathers near 10k threads), and a smaller grid leaves the SMs to training. The rows in device
memory are copied by blocks of their own, up to a full grid of `THREADS_PER_SM` threads on every
SM; `max_threads=None` lifts the host cap too."""
THREADS_PER_SM = 2048  # resident threads per SM on Volta..Hopper
STAGING_DEPTH = 2  # pinned id/row buffers in turn: a batch reuses the one of two batches back
GATHER_COUNTERS = 7  # graphtier/cuda_gather.h kGatherCounters: 5 sources, bad ids, one bad id
_ERR_NAMES = {1: "cudaErrorInvalidValue", 98: "cudaErrorInvalidDeviceFunction", 209: "cudaErrorNoKernelImageForDevice"}


def load_cuda_ops() -> None:
    """Import the compiled GPU ops (torch.ops.graphtier_cuda.*); CudaError saying why not."""
    if not torch.cuda.is_available():
        raise CudaError("torch sees no CUDA device (a CPU build of torch, no driver, or no visible GPU)")
    try:
        importlib.import_module("graphtier.service._native_cuda")  # registers the ops
    except ImportError as exc:
        raise CudaError(
            f"the GPU ops are not built ({exc}); reinstall with torch built for CUDA and nvcc on PATH "
            "(`pip install --no-build-isolation -e .`)"
        ) from None


@dataclass(frozen=True)
class CudaFeatureTiers:
    """The feature table as one GPU sees it: boundaries and the address of every part.

    `interleaved_ptrs[j]` is share j of the interleaved tier mapped on this GPU (0 when that
    GPU is not reachable: its rows are then read from the host copy and counted as host).
    `host_ptr` is the registered host mapping of rows [0, host_end); `storage` holds rows
    [host_end, num_rows) on the CPU (a memory-mapped file), staged per batch.
    """

    device: torch.device
    replicated_end: int
    interleaved_end: int
    host_end: int
    num_rows: int
    num_devices: int
    device_index: int
    dtype: torch.dtype
    row_shape: tuple[int, ...]
    replicated_ptr: int
    interleaved_ptrs: tuple[int, ...]
    host_ptr: int
    storage: torch.Tensor | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.replicated_end <= self.interleaved_end <= self.host_end <= self.num_rows:
            raise GraphtierError(f"tier boundaries out of order: {self.boundaries}")
        if len(self.interleaved_ptrs) != self.num_devices or not 0 <= self.device_index < self.num_devices:
            raise GraphtierError(
                f"{len(self.interleaved_ptrs)} interleaved shares for {self.num_devices} devices "
                f"(device_index {self.device_index})"
            )
        if self.replicated_end and not self.replicated_ptr:
            raise GraphtierError("the replicated tier has rows but no device address")
        needs_host = self.host_end > self.interleaved_end or (
            self.interleaved_end > self.replicated_end and not all(self.interleaved_ptrs)
        )
        if needs_host and not self.host_ptr:
            raise GraphtierError("host rows are read but no registered host address was given")
        storage_rows = self.num_rows - self.host_end
        if storage_rows and (
            self.storage is None
            or self.storage.shape[0] != storage_rows
            or self.storage.device.type != "cpu"
            or not self.storage.is_contiguous()
        ):
            raise GraphtierError(f"the storage tier needs a contiguous CPU tensor of {storage_rows} rows")

    @property
    def boundaries(self) -> tuple[int, int, int, int]:
        return (self.replicated_end, self.interleaved_end, self.host_end, self.num_rows)

    @property
    def row_bytes(self) -> int:
        return math.prod(self.row_shape) * torch.empty((), dtype=self.dtype).element_size()


def count_rows(ids: torch.Tensor, tiers: CudaFeatureTiers) -> list[int]:
    """Rows per source (traffic.SOURCES order) on the ids' own device; rows of an unreachable
    peer's share count as host."""
    rep, inter, host, _ = tiers.boundaries
    edges = torch.tensor([rep, inter, host], dtype=torch.int64, device=ids.device)
    per_tier = torch.bincount(torch.bucketize(ids, edges, right=True), minlength=4)
    nd = tiers.num_devices
    off = ids[(ids >= rep) & (ids < inter)] - rep
    per_share = torch.bincount(off % nd, minlength=nd)
    rows = torch.cat([per_tier, per_share]).tolist()
    tier_rows, share_rows = rows[:4], rows[4:]
    local = share_rows[tiers.device_index]
    if not tiers.interleaved_ptrs[tiers.device_index] and local:
        raise GraphtierError("this GPU's own interleaved share has rows but no address")
    unreachable = sum(r for j, r in enumerate(share_rows) if not tiers.interleaved_ptrs[j])
    peer = tier_rows[1] - local - unreachable
    return [tier_rows[0], local, peer, tier_rows[2] + unreachable, tier_rows[3]]


class GatherGrid(NamedTuple):
    """Blocks of `GATHER_THREADS` threads for each part of a batch (see cuda_gather.h)."""

    device_blocks: int  # rows in device memory: the replica and the interleaved shares
    host_blocks: int  # rows read from host memory: the host tier and the staged storage rows


def gather_grid(
    sm_count: int, *, sm_share: float | None = None, max_threads: int | None = GATHER_MAX_THREADS
) -> GatherGrid:
    """The gather's grid: host reads on at most `max_threads` threads (None: a full grid), device
    reads on a full grid; with `sm_share`, both together on about that share of the SMs' threads."""
    if sm_share is not None and not 0 < sm_share <= 1:
        raise GraphtierError(f"sm_share must be in (0, 1], got {sm_share}")
    if max_threads is not None and max_threads < GATHER_THREADS:
        raise GraphtierError(f"max_threads must be at least one block of {GATHER_THREADS} threads, got {max_threads}")
    full = max(1, sm_count * THREADS_PER_SM // GATHER_THREADS)
    host = full if max_threads is None else min(full, max_threads // GATHER_THREADS)
    device = full
    if sm_share is not None:
        share = max(1, round(sm_count * sm_share * THREADS_PER_SM / GATHER_THREADS))
        host = min(host, share)
        device = max(1, share - host)
    return GatherGrid(device, host)


class StorageRowReader(Protocol):
    """Reads storage rows (storage-relative ids) into a C-contiguous array, row for row: the
    dataset's `StorageReader` in the `direct` and `page-cache` modes. Its file geometry and memory
    alignment place the staged rows so that its direct reads land in them."""

    data_offset: int
    first_row: int
    row_bytes: int
    alignment: DirectIOAlignment

    def read(self, rows: np.ndarray, out: np.ndarray) -> None: ...


class GatherKernel(Protocol):
    """The launch of torch.ops.graphtier_cuda.tiered_gather (see bindings.cpp for the arguments);
    returns the cudaError_t of the launch. The CPU emulation in tests/service/gpu is another one."""

    def __call__(
        self,
        sorted_ids: torch.Tensor,
        positions: torch.Tensor,
        pointers: torch.Tensor,
        bounds: torch.Tensor,
        row_bytes: int,
        device_blocks: int,
        host_blocks: int,
        threads: int,
        out: torch.Tensor,
        counters: torch.Tensor,
    ) -> int: ...


@dataclass
class _Stage:
    """One turn of the pinned buffers: the batch's ids on their way to the GPU and its staged
    storage rows, and the event after which the GPU has read both."""

    ids: torch.Tensor | None = None
    rows: torch.Tensor | None = None  # bytes; the rows start where `_placement` puts them
    done: torch.cuda.Event | None = None


LINE_BYTES = 128  # the kernel reads whole 16-byte pieces of 128-byte lines


def _grow(
    buffer: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype, pinned: bool, spare_bytes: int = 0
) -> torch.Tensor:
    """`buffer` if it holds `shape[0]` rows and `spare_bytes` more, else a larger one (doubling)."""
    row_bytes = max(1, math.prod(shape[1:]) * torch.empty((), dtype=dtype).element_size())
    rows = shape[0] + -(-spare_bytes // row_bytes)
    if buffer is not None and buffer.shape[0] >= rows:
        return buffer
    capacity = max(rows, 1024, 0 if buffer is None else 2 * buffer.shape[0])
    return torch.empty((capacity, *shape[1:]), dtype=dtype, pin_memory=pinned)


class CudaGather:
    """Gathers batches for one GPU, each with one launch that does not wait for the GPU.

    The grid (`gather_grid`): at most `max_threads` threads read host memory (`GATHER_MAX_THREADS`
    by default, None for a full grid), device rows get blocks of their own, and with `sm_share`
    all of them keep to about that share of the SMs, so a producer without MPS leaves the rest to
    training. Not thread-safe: one per thread (it owns pinned buffers, a
    pointer table and the device counters). `storage_reader`: reads the batch's storage rows
    into the pinned staging buffer (`--storage-reads direct|page-cache`); None copies them out
    of the tiers' file mapping (`mmap`). `kernel` replaces the CUDA launch (the CPU emulation
    of tests/service/gpu runs this class's own code over CPU tensors)."""

    def __init__(
        self,
        tiers: CudaFeatureTiers,
        *,
        sm_share: float | None = None,
        max_threads: int | None = GATHER_MAX_THREADS,
        storage_reader: StorageRowReader | None = None,
        kernel: GatherKernel | None = None,
    ) -> None:
        if kernel is None:
            load_cuda_ops()
            kernel = torch.ops.graphtier_cuda.tiered_gather
        self.tiers = tiers
        self.storage_reader = storage_reader
        self._kernel = kernel
        on_gpu = tiers.device.type == "cuda"
        sms = torch.cuda.get_device_properties(tiers.device).multi_processor_count if on_gpu else 1
        self.threads = GATHER_THREADS
        self.grid = gather_grid(sms, sm_share=sm_share, max_threads=max_threads)
        ptrs = [tiers.replicated_ptr, tiers.host_ptr, 0, *tiers.interleaved_ptrs]
        self._pointers = torch.tensor(ptrs, dtype=torch.int64)
        self._counters = torch.zeros(GATHER_COUNTERS, dtype=torch.int64, device=tiers.device)
        self._pinned = on_gpu
        self._stages = [_Stage() for _ in range(STAGING_DEPTH)]
        self._turn = 0

    @property
    def host_threads(self) -> int:
        """Threads at most reading host memory at once."""
        return self.grid.host_blocks * self.threads

    def _check_out(self, ids: torch.Tensor, out: torch.Tensor) -> int:
        t = self.tiers
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.dtype != torch.int64:
            raise GraphtierError(f"ids must be a 1-D int64 tensor, got {ids!r:.80}")
        n = ids.numel()
        if not isinstance(out, torch.Tensor) or out.device != t.device or not out.is_contiguous():
            raise GraphtierError(f"out must be a contiguous tensor on {t.device}, got {out!r:.80}")
        if out.dtype != t.dtype or tuple(out.shape[1:]) != t.row_shape or out.shape[0] < n:
            raise GraphtierError(
                f"out is {out.dtype} {tuple(out.shape)} but {n} rows of {t.dtype} {t.row_shape} are gathered"
            )
        return n

    def _check(self, ids: torch.Tensor, out: torch.Tensor) -> int:
        t = self.tiers
        n = self._check_out(ids, out)
        if ids.device not in (torch.device("cpu"), t.device):
            raise GraphtierError(f"ids must be on the CPU or {t.device}, not {ids.device}")
        if n:
            lo, hi = (int(v) for v in torch.aminmax(ids))
            if lo < 0 or hi >= t.num_rows:
                bad = int(((ids < 0) | (ids >= t.num_rows)).nonzero()[0])
                raise GraphtierError(f"id {int(ids[bad])} at position {bad} is out of range [0, {t.num_rows})")
        return n

    def _next_stage(self) -> _Stage:
        """The pinned buffers of this turn, once the GPU has read what they held two batches ago."""
        stage = self._stages[self._turn]
        self._turn = (self._turn + 1) % STAGING_DEPTH
        if stage.done is not None:
            stage.done.synchronize()
            stage.done = None
        return stage

    def _stage_rows(self, stage: _Stage, storage_ids: torch.Tensor) -> int:
        """Read the storage rows (sorted ids, CPU) into this turn's pinned buffer, through the storage
        reader when there is one (direct I/O lands in the pinned rows), else out of the file
        mapping; the buffer's address."""
        t = self.tiers
        k = storage_ids.numel()
        nbytes = k * t.row_bytes
        reader = self.storage_reader
        align = max(LINE_BYTES, reader.alignment.memory) if reader is not None else LINE_BYTES
        # room to place the rows, and readable up to the 128-byte line past the last, as the kernel asks
        stage.rows = _grow(stage.rows, (nbytes + LINE_BYTES + align,), torch.uint8, self._pinned)
        relative = storage_ids - t.host_end
        start = self._placement(stage.rows.data_ptr(), int(relative[0]))
        rows = stage.rows[start : start + nbytes]
        if reader is not None:
            reader.read(relative.numpy(), rows.view(k, t.row_bytes).numpy())
        else:
            assert t.storage is not None
            torch.index_select(t.storage, 0, storage_ids - t.host_end, out=rows.view(t.dtype).view(k, *t.row_shape))
        return rows.data_ptr()

    def _placement(self, base: int, first_row: int) -> int:
        """Bytes from `base` to the staged rows: to the next 128-byte line, or, with a storage reader,
        to the next address congruent to the file offset of `first_row` (storage-relative, the
        batch's first) modulo the reader's memory alignment, so that its direct reads of adjacent
        rows go straight into the buffer (every run of them when the rows are a multiple of the
        alignment long). Either way 16-byte aligned, as the kernel asks."""
        reader = self.storage_reader
        if reader is not None:
            offset = reader.data_offset + (reader.first_row + first_row) * reader.row_bytes
            align = reader.alignment.memory
            if offset % 16 == 0 and align % 16 == 0:
                return (offset - base) % align
        return -base % LINE_BYTES

    def _finish(self, stage: _Stage) -> None:
        if self._pinned:
            stage.done = torch.cuda.Event()
            stage.done.record(torch.cuda.current_stream(self.tiers.device))  # the stream the kernel ran on

    def launch(
        self,
        sorted_ids: torch.Tensor,
        positions: torch.Tensor,
        out: torch.Tensor,
        storage_first: int,
        staged_ptr: int = 0,
    ) -> None:
        """Enqueue the kernel on the current stream for sorted ids on the device."""
        t = self.tiers
        self._pointers[2] = staged_ptr
        bounds = torch.tensor(
            [t.replicated_end, t.interleaved_end, t.host_end, t.num_rows, storage_first, t.device_index],
            dtype=torch.int64,
        )
        err = self._kernel(
            sorted_ids,
            positions,
            self._pointers,
            bounds,
            t.row_bytes,
            self.grid.device_blocks,
            self.grid.host_blocks,
            self.threads,
            out,
            self._counters,
        )
        if err:
            raise CudaError(f"tiered gather kernel launch failed: {_ERR_NAMES.get(err, 'cudaError')} ({err})")

    def gather(self, ids: torch.Tensor, out: torch.Tensor) -> TrafficCounts:
        """Write rows `ids` into out[:len(ids)] on the GPU; the exact traffic per source.

        Ids on the CPU: checked and counted on the host, and nothing waits for the GPU (the
        producer's path). Ids on the GPU: checked and counted with two small reads back; a
        caller that keeps them there uses `gather_device`. GraphtierError names a bad id or a
        mismatched `out`.
        """
        t = self.tiers
        n = self._check(ids, out)
        if n == 0:
            return TrafficCounts.from_rows([0] * 5, t.row_bytes, simulated=False)
        counts = TrafficCounts.from_rows(count_rows(ids, t), t.row_bytes, simulated=False)
        if ids.device.type == "cpu":
            self._gather_host_ids(ids, out)
        else:
            self.gather_device(ids, out)
        return counts

    def _gather_host_ids(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        t, n = self.tiers, ids.numel()
        stage = self._next_stage()
        stage.ids = _grow(stage.ids, (n,), torch.int64, self._pinned)
        stage.ids[:n].copy_(ids)
        sorted_ids, positions = torch.sort(stage.ids[:n].to(t.device, non_blocking=True))
        storage_ids = ids[ids >= t.host_end]
        staged = self._stage_rows(stage, storage_ids.sort().values) if storage_ids.numel() else 0
        self.launch(sorted_ids, positions, out, n - storage_ids.numel(), staged)
        self._finish(stage)

    def gather_device(self, ids: torch.Tensor, out: torch.Tensor) -> None:
        """Write rows `ids` (int64 on this GPU, e.g. a GPU sampler's node ids) into out[:len(ids)],
        enqueued on the current stream. Reads nothing back, unless the plan has a storage tier:
        its ids then come to the host to be staged. Ids out of range are skipped and reported by
        the next `take_counts`; the counts of the rows accumulate on the device for it too."""
        t = self.tiers
        n = self._check_out(ids, out)
        if ids.device != t.device:
            raise GraphtierError(f"gather_device takes ids on {t.device}, not {ids.device}; use gather()")
        if n == 0:
            return
        sorted_ids, positions = torch.sort(ids)
        if t.host_end == t.num_rows:
            self.launch(sorted_ids, positions, out, n)
            return
        stage = self._next_stage()
        first = int(torch.searchsorted(sorted_ids, t.host_end))  # the storage tier's one read back
        storage_ids = sorted_ids[first:].cpu()
        storage_ids = storage_ids[storage_ids < t.num_rows]  # bad ids sort last: the kernel skips them
        staged = self._stage_rows(stage, storage_ids) if storage_ids.numel() else 0
        self.launch(sorted_ids, positions, out, first, staged)
        self._finish(stage)

    def take_counts(self) -> TrafficCounts:
        """The rows per source of every gather since the last call, read back once (it waits for
        the gathers enqueued on the current stream), and the counters zeroed. GraphtierError when
        `gather_device` met ids out of range (their output rows were not written)."""
        t = self.tiers
        values = self._counters.cpu().tolist()
        self._counters.zero_()
        if values[5]:
            raise GraphtierError(
                f"{values[5]} ids out of range [0, {t.num_rows}) were skipped by the GPU gathers since the "
                f"last count (one of them: {values[6]}); their rows in the output were not written"
            )
        return TrafficCounts.from_rows(values[:5], t.row_bytes, simulated=False)
