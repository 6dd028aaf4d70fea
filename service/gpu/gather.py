"""The tiered gather on the GPU: one kernel launch per batch over a pointer table.

`CudaGather(tiers).gather(ids, out)` writes row ids[i] into out[i] (GPU memory) from
wherever the row lives: this GPU's replica, a local or peer share of the interleaved tier,
registered host memory read in place (zero-copy over PCIe), or storage rows staged through
a pinned buffer. The ids are sorted on the GPU first (host rows in address order, each tier
a contiguous run) and the kernel restores the caller's order. The result is bit-identical to
the CPU `tiered_gather`, and so are the `TrafficCounts`, except that `simulated` is False:
the device bytes really came from device memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.gpu.runtime import CudaError

THREADS_FULL = 512
THREADS_CAPPED = 1024
_ERR_NAMES = {1: "cudaErrorInvalidValue", 98: "cudaErrorInvalidDeviceFunction", 209: "cudaErrorNoKernelImageForDevice"}


def load_cuda_ops() -> None:
    """Import the compiled GPU ops (torch.ops.graphtier_cuda.*); CudaError saying why not."""
    if not torch.cuda.is_available():
        raise CudaError("torch sees no CUDA device (a CPU build of torch, no driver, or no visible GPU)")
    try:
        import graphtier.service._native_cuda  # noqa: F401  (registers the ops)
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


class CudaGather:
    """Gathers batches for one GPU. `sm_share` caps the grid to about that share of the SMs
    (blocks of 1024 threads, one per SM) so a producer leaves the rest to training. Not
    thread-safe: one per thread (it owns a staging buffer and a pointer table)."""

    def __init__(self, tiers: CudaFeatureTiers, *, sm_share: float | None = None) -> None:
        load_cuda_ops()
        if sm_share is not None and not 0 < sm_share <= 1:
            raise GraphtierError(f"sm_share must be in (0, 1], got {sm_share}")
        self.tiers = tiers
        sms = torch.cuda.get_device_properties(tiers.device).multi_processor_count
        if sm_share is None:
            self.threads, self.max_blocks = THREADS_FULL, sms * (2048 // THREADS_FULL)
        else:
            self.threads, self.max_blocks = THREADS_CAPPED, max(1, round(sms * sm_share))
        ptrs = [tiers.replicated_ptr, tiers.host_ptr, 0, *tiers.interleaved_ptrs]
        self._pointers = torch.tensor(ptrs, dtype=torch.int64)
        self._staging: torch.Tensor | None = None
        self._staging_free: torch.cuda.Event | None = None

    def _check(self, ids: torch.Tensor, out: torch.Tensor) -> int:
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
        if ids.device not in (torch.device("cpu"), t.device):
            raise GraphtierError(f"ids must be on the CPU or {t.device}, not {ids.device}")
        if n:
            lo, hi = (int(v) for v in torch.aminmax(ids))
            if lo < 0 or hi >= t.num_rows:
                bad = int(((ids < 0) | (ids >= t.num_rows)).nonzero()[0])
                raise GraphtierError(f"id {int(ids[bad])} at position {bad} is out of range [0, {t.num_rows})")
        return n

    def _stage(self, storage_ids: torch.Tensor) -> int:
        """Copy the storage rows (sorted ids, CPU) into the pinned staging buffer; its address."""
        t = self.tiers
        k = storage_ids.numel()
        if self._staging_free is not None:
            self._staging_free.synchronize()  # the last batch's kernel has read the buffer
        if self._staging is None or self._staging.shape[0] < k:
            rows = max(k, 1024, 0 if self._staging is None else 2 * self._staging.shape[0])
            self._staging = torch.empty((rows, *t.row_shape), dtype=t.dtype, pin_memory=True)
        assert t.storage is not None
        torch.index_select(t.storage, 0, storage_ids - t.host_end, out=self._staging[:k])
        return self._staging.data_ptr()

    def launch(
        self,
        sorted_ids: torch.Tensor,
        positions: torch.Tensor,
        out: torch.Tensor,
        storage_first: int,
        staged_ptr: int = 0,
    ) -> None:
        """Enqueue the kernel on the current stream for already sorted, checked ids."""
        t = self.tiers
        self._pointers[2] = staged_ptr
        bounds = torch.tensor(
            [t.replicated_end, t.interleaved_end, t.host_end, t.num_rows, storage_first], dtype=torch.int64
        )
        err = torch.ops.graphtier_cuda.tiered_gather(
            sorted_ids, positions, self._pointers, bounds, t.row_bytes, self.max_blocks, self.threads, out
        )
        if err:
            raise CudaError(f"tiered gather kernel launch failed: {_ERR_NAMES.get(err, 'cudaError')} ({err})")

    def gather(self, ids: torch.Tensor, out: torch.Tensor) -> TrafficCounts:
        """Write rows `ids` into out[:len(ids)] on the GPU; the exact traffic per source.

        Asynchronous on the current stream except for the small reads it needs (id range,
        storage ids, counts); GraphtierError names a bad id or a mismatched `out`.
        """
        t = self.tiers
        n = self._check(ids, out)
        if n == 0:
            return TrafficCounts.from_rows([0] * 5, t.row_bytes, simulated=False)
        dev_ids = ids.to(t.device, non_blocking=True)
        sorted_ids, positions = torch.sort(dev_ids)
        if ids.device.type == "cpu":
            storage_ids = ids[ids >= t.host_end]
        else:
            first = int(torch.searchsorted(sorted_ids, t.host_end))
            storage_ids = sorted_ids[first:].cpu()
        staged = 0
        if storage_ids.numel():
            staged = self._stage(storage_ids.sort().values)
        self.launch(sorted_ids, positions, out, n - storage_ids.numel(), staged)
        if staged:
            self._staging_free = torch.cuda.Event()
            self._staging_free.record(torch.cuda.current_stream(t.device))  # the stream the kernel ran on
        return TrafficCounts.from_rows(count_rows(ids, t), t.row_bytes, simulated=False)
