"""The GPU gather's kernel (native/cuda/tiered_gather.cu) re-stated on the CPU, thread by thread,
over real memory (a plain module so tests can import it).

`EmulatedGatherKernel` is a `GatherKernel`: called with the very arguments `CudaGather.launch`
gives the CUDA op (pointer table, bounds, grid, counters), it runs the kernel's grid-stride loop
for every thread of the grid, in a shuffled order, on Python ints: the lanes per row, the row's
source and counter, the walk over 16-byte pieces of the 128-byte lines the row touches, the
exact (16-, 4- or 1-byte) stores. Loads read the addresses the kernel would read (ctypes), after
checking that each one is a whole, 16-byte aligned piece inside a region the caller declared
readable (tier bases up to the 128-byte line past their last row); stores must land inside the
output rows. So the test of CudaGather on CPU tensors runs its own orchestration (sorting,
staging, positions, the storage boundary, the counters) through the kernel's index math.
"""

from __future__ import annotations

import bisect
import ctypes
import random

import torch

COUNTERS = 7  # kGatherCounters
BAD_IDS, BAD_ID = 5, 6  # kCounterBadIds, kCounterBadId
LINE = 128
INVALID_VALUE = 1  # cudaErrorInvalidValue


def round_up(value: int, to: int) -> int:
    return -(-value // to) * to


def lanes_per_row(row_bytes: int) -> int:
    """launch_tiered_gather: enough 16-byte chunks to cover a row in one pass, 4 to 32."""
    chunks = (row_bytes + 15) // 16
    return 32 if chunks > 16 else 16 if chunks > 8 else 8 if chunks > 4 else 4


def padded_region(nbytes: int, *, misalign: int = 0) -> tuple[torch.Tensor, int]:
    """A CPU byte buffer and an address in it, `misalign` bytes (a multiple of 16) past a 128-byte
    line, with `nbytes` and the rest of the last line readable after it: how the daemon's
    allocations and page-aligned mappings look to the kernel."""
    buf = torch.zeros(nbytes + 3 * LINE, dtype=torch.uint8)
    base = round_up(buf.data_ptr(), LINE) + misalign
    return buf, base


class EmulatedGatherKernel:
    """torch.ops.graphtier_cuda.tiered_gather on CPU tensors; see the module docstring."""

    def __init__(self, readable: list[tuple[int, int]], *, order_seed: int = 0) -> None:
        self.readable = list(readable)
        self.order = random.Random(order_seed)
        self.launches: list[dict[str, int]] = []  # grid of each launch
        # rows read per source (counter index) by the device part's blocks and by the host part's
        self.part_sources: dict[str, list[int]] = {"device": [0] * BAD_ID, "host": [0] * BAD_ID}
        self.loads = 0

    def _check_load(self, c: int, staged: tuple[int, int] | None) -> None:
        assert c % 16 == 0, f"a load at {c:#x} is not 16-byte aligned"
        regions = self.readable + ([staged] if staged else [])
        assert any(lo <= c and c + 16 <= hi for lo, hi in regions), f"a load at {c:#x} reads outside every region"

    def __call__(self, *args: torch.Tensor | int) -> int:
        """The op's arguments, in its order (bindings.cpp)."""
        sorted_ids, positions, pointers, bounds, row_bytes, device_blocks, host_blocks, threads, out, counters = args
        n = sorted_ids.numel()
        p = pointers.tolist()
        rep_end, inter_end, host_end, num_rows, storage_first, device_index = bounds.tolist()
        replicated, host, staged, interleaved = p[0], p[1], p[2], p[3:]
        nd = len(interleaved)
        if n <= 0 or row_bytes <= 0:
            return 0
        if device_blocks < 1 or host_blocks < 1 or threads < 32 or threads > 1024 or threads % 32:
            return INVALID_VALUE
        if not 1 <= nd <= 16 or not 0 <= device_index < nd or counters.numel() != COUNTERS:
            return INVALID_VALUE
        g = lanes_per_row(row_bytes)
        wanted = (n * g + threads - 1) // threads  # launch_group()
        device = min(wanted, device_blocks) if inter_end > 0 else 0
        blocks = device + min(wanted, host_blocks)
        self.launches.append({"device_blocks": device, "host_blocks": blocks - device, "threads": threads, "lanes": g})
        words = (out.data_ptr() | replicated | host | staged | row_bytes | _or(interleaved)) & 3 == 0
        ids, pos = sorted_ids.tolist(), positions.tolist()
        out_lo, out_hi = out.data_ptr(), out.data_ptr() + out.numel() * out.element_size()
        staged_region = None
        if staged:
            staged_region = (staged, round_up(staged + (n - storage_first) * row_bytes, LINE))

        def source(v: int, i: int) -> tuple[int, int]:  # row_source()
            if v < rep_end:
                return replicated + v * row_bytes, 0
            if v < inter_end:
                off = v - rep_end
                share_index = off % nd
                share = interleaved[share_index]
                if share:
                    return share + (off // nd) * row_bytes, 1 if share_index == device_index else 2
                return host + v * row_bytes, 3
            if v < host_end:
                return host + v * row_bytes, 3
            return staged + (i - storage_first) * row_bytes, 4

        block_counts = [[0] * BAD_ID for _ in range(blocks)]
        split = bisect.bisect_left(ids, inter_end) if device else 0  # host_part_begin(), or all host
        tids = list(range(blocks * threads))
        self.order.shuffle(tids)
        for tid in tids:
            block, thread = divmod(tid, threads)
            lane, counts = thread % g, block_counts[block]
            device_part = block < device
            begin, end = (0, split) if device_part else (split, n)
            part_blocks = device if device_part else blocks - device
            groups = part_blocks * threads // g
            first = begin + ((block if device_part else block - device) * threads + thread) // g
            for i in range(first, end, groups):
                v = ids[i]
                if v < 0 or v >= num_rows:
                    if lane == 0:
                        counts[BAD_IDS] += 1
                        counters[BAD_ID] = v
                    continue
                s, src = source(v, i)
                if lane == 0:
                    counts[src] += 1
                    self.part_sources["device" if device_part else "host"][src] += 1
                e = s + row_bytes
                d = out_lo + pos[i] * row_bytes
                assert out_lo <= d and d + row_bytes <= out_hi, f"row {i} is written outside the output"
                c = (s & ~127) + 16 * lane
                while c < e:
                    if c + 16 > s:
                        self._check_load(c, staged_region)
                        self.loads += 1
                        v16 = ctypes.string_at(c, 16)
                        dst = d + (c - s)
                        if c >= s and c + 16 <= e and dst % 16 == 0:
                            ctypes.memmove(dst, v16, 16)
                        else:  # store_partial
                            step = 4 if words else 1
                            for k in range(0, 16, step):
                                a = c + k
                                if s <= a < e:
                                    ctypes.memmove(d + (a - s), v16[k : k + step], step)
                    c += 16 * g
        for counts in block_counts:  # the end of each block: its counts into the device counters
            for k, value in enumerate(counts):
                counters[k] += value
        return 0


class EmulatedTable:
    """A feature table laid out as the GPU sees it, on the CPU: each device share and the host tier
    in its own padded buffer (the host tier starting mid-line), storage rows in a tensor; `gather`
    makes a `CudaGather` over it with the emulated kernel, `expected` is the CPU gather's answer."""

    def __init__(self, table, host_end, rep, inter, nd, device_index, *, drop_share=None):
        from graphtier.service.gpu.gather import CudaFeatureTiers

        self.table = table
        self.layout = (rep, inter, host_end, nd, device_index)
        num_rows = table.shape[0]
        rows = table.reshape(num_rows, -1).view(torch.uint8)
        self._keep: list[torch.Tensor] = []
        self.readable: list[tuple[int, int]] = []
        shares = [self._place(rows[rep + j : inter : nd].contiguous()) for j in range(nd)]
        if drop_share is not None:
            shares[drop_share] = 0
        self.tiers = CudaFeatureTiers(
            device=torch.device("cpu"),
            replicated_end=rep,
            interleaved_end=inter,
            host_end=host_end,
            num_rows=num_rows,
            num_devices=nd,
            device_index=device_index,
            dtype=table.dtype,
            row_shape=tuple(table.shape[1:]),
            replicated_ptr=self._place(rows[:rep].contiguous()) if rep else 0,
            interleaved_ptrs=tuple(shares),
            host_ptr=self._place(rows[:host_end].contiguous(), misalign=48),
            storage=table[host_end:].clone(),
        )

    def _place(self, part: torch.Tensor, misalign: int = 0) -> int:
        buf, base = padded_region(part.numel(), misalign=misalign)
        start = base - buf.data_ptr()
        buf[start : start + part.numel()] = part.reshape(-1)
        self._keep.append(buf)
        self.readable.append((base, round_up(base + part.numel(), LINE)))
        return base

    def gather(self, **options):
        """(CudaGather over the table with the emulated kernel, that kernel)."""
        from graphtier.service.gpu.gather import CudaGather

        order_seed = options.pop("order_seed", 0)
        kernel = EmulatedGatherKernel(self.readable, order_seed=order_seed)
        return CudaGather(self.tiers, kernel=kernel, **options), kernel

    def expected(self, ids: torch.Tensor):
        """(rows, TrafficCounts) of the CPU gather of `ids` over the same layout."""
        from graphtier.service.gather import FeatureTiers, tiered_gather

        rep, inter, host_end, nd, device_index = self.layout
        tiers = FeatureTiers.from_table(
            self.table,
            replicated_end=rep,
            interleaved_end=inter,
            host_end=host_end,
            num_devices=nd,
            device_index=device_index,
        )
        out = torch.empty((ids.numel(), *self.table.shape[1:]), dtype=self.table.dtype)
        return out, tiered_gather(ids, tiers, out, backend="torch")

    def empty_out(self, n: int) -> torch.Tensor:
        return torch.full((n + 3, *self.table.shape[1:]), float("nan"), dtype=self.table.dtype)


def _or(values: list[int]) -> int:
    bits = 0
    for v in values:
        bits |= v
    return bits
