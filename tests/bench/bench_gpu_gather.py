"""GPU tiered gather on a CUDA machine: every figure is a ratio to a baseline of the same run.

    python tests/bench/bench_gpu_gather.py [--host-gib 8] [--scale 22] [--skip-tiering] [--json OUT]

1. Host tier, zero-copy: rows at random ids from >= 8 GiB of registered /dev/shm, 512 B and
   400 B rows (useful bytes counted), full grid and about 10% of the SMs, against the same
   run's cudaMemcpy host-to-device bandwidth from that registered memory.
2. Device tier: the same gather from a device allocation against a device-to-device copy of
   the same bytes.
3. Traffic you can trust: NVML's PCIe RX byte counter over a run of host gathers against the
   software-accounted host bytes.
4. The point of tiering: R-MAT (fanout 15,10,5, batch 1024, wrpr order, 10% train split) id
   stream gathered with 0% and 10% of the rows on the device: PCIe bytes and time.
5. GPU sampling on the same graph and batches: the GPU sampler with the structure read from
   registered host memory, with the device structure tier the placement gives 25% of the
   structure bytes, and with all of it on the device, against graphtier's CPU sampler on this
   machine's cores; and whole batches made on one stream (sample, then gather from the host
   tier) against the CPU sampler alone. Batches are checked bit-identical to the CPU sampler's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model

GiB = 1 << 30


def timed(fn, reps: int = 5) -> float:
    """Median seconds of `fn` on the current stream, by CUDA events, after one warm-up."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return sorted(times)[len(times) // 2]


def fill_distinct(t: torch.Tensor) -> None:
    """Write every 4-byte word its own index (never zeros: they hide unwritten rows)."""
    words = t.view(-1).view(torch.int32)
    step = 1 << 27
    for first in range(0, words.numel(), step):
        last = min(first + step, words.numel())
        words[first:last] = torch.arange(first + 1, last + 1, dtype=torch.int64).to(torch.int32)


def memcpy_async(dst: int, src: int, nbytes: int, kind: str) -> None:
    from graphtier.service.gpu.runtime import check, cudart

    rt = cudart()
    kinds = {"h2d": rt.cudaMemcpyKind.cudaMemcpyHostToDevice, "d2d": rt.cudaMemcpyKind.cudaMemcpyDeviceToDevice}
    stream = torch.cuda.current_stream().cuda_stream
    check(rt.cudaMemcpyAsync(dst, src, nbytes, kinds[kind], stream), f"cudaMemcpyAsync {kind}")


class PcieCounter:
    """NVML PCIe RX/TX byte counters of GPU 0 (fields 198/197), or None with the reason."""

    def __init__(self) -> None:
        self.reason = ""
        try:
            import pynvml as nv

            nv.nvmlInit()
            from graphtier.service.gpu.runtime import pci_bus_id

            # NVML orders GPUs by PCI bus, CUDA fastest first: find CUDA device 0 by its bus id
            self.nv, self.handle = nv, nv.nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id(0))
            self.read()
        except Exception as exc:  # any failure is reported, never fatal
            self.reason = repr(exc)[:200]

    def read(self) -> tuple[int, int] | None:
        """(RX, TX) bytes so far, each read by its NVML value type; None once a read failed."""
        from graphtier.service.hardware import nvml

        if self.reason:
            return None
        (rx_code, rx), (tx_code, tx) = nvml.read_fields(
            self.nv, self.handle, [nvml.FIELD_PCIE_RX_BYTES, nvml.FIELD_PCIE_TX_BYTES]
        )
        if rx_code or tx_code:
            self.reason = f"field values returned {[rx_code, tx_code]}"
            return None
        return int(rx), int(tx)


def host_tier_section(res: dict, host_gib: float, pcie: PcieCounter) -> None:
    from graphtier.service.gpu.gather import CudaFeatureTiers, CudaGather
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.shm import SegmentOwner

    nbytes = int(host_gib * GiB)
    owner = SegmentOwner()
    reg = None
    try:
        _, host = owner.create_tensor("bench-host-table", (nbytes // 4,), torch.float32)
        t0 = time.perf_counter()
        fill_distinct(host)
        res["host_fill_s"] = round(time.perf_counter() - t0, 2)
        reg = host_registry().register(host.data_ptr(), nbytes, "bench host table", read_only=False)
        res["host_register_s"] = round(reg.seconds, 3)
        res["host_huge_pages_advised"] = reg.huge_pages
        copy_bytes = 2 * GiB
        dst = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda")
        t = timed(partial(memcpy_async, dst.data_ptr(), host.data_ptr(), copy_bytes, "h2d"))
        h2d = copy_bytes / t
        res["h2d_memcpy_GBps"] = round(h2d / 1e9, 2)
        del dst
        for row_bytes in (512, 400):
            rows = nbytes // row_bytes
            tiers = CudaFeatureTiers(
                device=torch.device("cuda", 0),
                replicated_end=0,
                interleaved_end=0,
                host_end=rows,
                num_rows=rows,
                num_devices=1,
                device_index=0,
                dtype=torch.float32,
                row_shape=(row_bytes // 4,),
                replicated_ptr=0,
                interleaved_ptrs=(0,),
                host_ptr=host.data_ptr(),
            )
            n = GiB // row_bytes
            ids = torch.randint(0, rows, (n,), device="cuda")
            sorted_ids, positions = torch.sort(ids)
            out = torch.empty((n, row_bytes // 4), dtype=torch.float32, device="cuda")
            # "capped": the default grid (GATHER_MAX_THREADS in flight); "full": every SM's threads
            grids = (("capped", {}), ("full", {"max_threads": None}), ("sm10pct", {"sm_share": 0.1}))
            for label, grid in grids:
                gather = CudaGather(tiers, **grid)
                t = timed(partial(gather.launch, sorted_ids, positions, out, n))
                res[f"host_gather_{row_bytes}B_{label}_GBps"] = round(n * row_bytes / t / 1e9, 2)
                res[f"host_gather_{row_bytes}B_{label}_vs_h2d"] = round(n * row_bytes / t / h2d, 3)
            t = timed(lambda tiers=tiers, ids=ids, out=out: CudaGather(tiers).gather(ids, out), reps=3)
            res[f"host_gather_{row_bytes}B_with_sort_and_counts_vs_h2d"] = round(n * row_bytes / t / h2d, 3)
            device_path = CudaGather(tiers)  # the GPU sampler's path: sort and launch, no read back
            t = timed(lambda g=device_path, ids=ids, out=out: g.gather_device(ids, out), reps=3)
            res[f"host_gather_{row_bytes}B_device_ids_vs_h2d"] = round(n * row_bytes / t / h2d, 3)
            device_path.take_counts()
            # Correctness on a sample: the rows are what the CPU reads at those ids.
            check = ids[:4096].cpu()
            expect = host[: rows * (row_bytes // 4)].view(rows, row_bytes // 4)[check]
            assert torch.equal(out[:4096].cpu(), expect), f"{row_bytes} B gather returned wrong rows"
            if row_bytes == 512:
                before = pcie.read()
                gather = CudaGather(tiers)
                reps = 8
                torch.cuda.synchronize()
                for _ in range(reps):
                    gather.launch(sorted_ids, positions, out, n)
                torch.cuda.synchronize()
                time.sleep(1.2)  # the counters are refreshed by the driver about once a second
                after = pcie.read()
                accounted = reps * n * row_bytes
                if before and after:
                    res["nvml_pcie_rx_bytes_vs_accounted_host_bytes"] = round((after[0] - before[0]) / accounted, 3)
                    res["nvml_pcie_tx_bytes_vs_accounted_host_bytes"] = round((after[1] - before[1]) / accounted, 3)
                else:
                    res["nvml_pcie_unavailable"] = pcie.reason
            del ids, sorted_ids, positions, out
    finally:
        if reg is not None:
            host_registry().release(reg)  # before the mapping goes: a stale record would alias a new one
        owner.close()


def device_tier_section(res: dict) -> None:
    from graphtier.service.gpu.gather import CudaFeatureTiers, CudaGather
    from graphtier.service.memory.device_ipc import DeviceAllocation

    row_bytes, nbytes = 512, 8 * GiB
    rows = nbytes // row_bytes
    alloc = DeviceAllocation(0, nbytes, "bench device tier")
    try:
        from graphtier.service.gpu.views import cuda_view

        view = cuda_view(alloc.ptr, (rows, row_bytes // 4), torch.float32, 0, owner=alloc)
        view.normal_()
        tiers = CudaFeatureTiers(
            device=torch.device("cuda", 0),
            replicated_end=rows,
            interleaved_end=rows,
            host_end=rows,
            num_rows=rows,
            num_devices=1,
            device_index=0,
            dtype=torch.float32,
            row_shape=(row_bytes // 4,),
            replicated_ptr=alloc.ptr,
            interleaved_ptrs=(0,),
            host_ptr=0,
        )
        n = 2 * GiB // row_bytes
        ids = torch.randint(0, rows, (n,), device="cuda")
        sorted_ids, positions = torch.sort(ids)
        out = torch.empty((n, row_bytes // 4), dtype=torch.float32, device="cuda")
        gather = CudaGather(tiers)
        t_gather = timed(partial(gather.launch, sorted_ids, positions, out, n))
        t_full = timed(partial(CudaGather(tiers, max_threads=None).launch, sorted_ids, positions, out, n))
        t_copy = timed(partial(memcpy_async, out.data_ptr(), alloc.ptr, n * row_bytes, "d2d"))
        res["device_gather_full_grid_vs_d2d_copy"] = round(t_copy / t_full, 3)
        t_torch = timed(partial(torch.index_select, view, 0, ids, out=out))
        res["device_gather_GBps_read_plus_write"] = round(2 * n * row_bytes / t_gather / 1e9, 1)
        res["device_d2d_copy_GBps_read_plus_write"] = round(2 * n * row_bytes / t_copy / 1e9, 1)
        res["device_gather_vs_d2d_copy"] = round(t_copy / t_gather, 3)
        res["torch_index_select_vs_d2d_copy"] = round(t_copy / t_torch, 3)
        gather.launch(sorted_ids, positions, out, n)
        assert torch.equal(out[:4096], view[ids[:4096]]), "device gather returned wrong rows"
        del view, out, ids, sorted_ids, positions
    finally:
        alloc.close()


def tiering_section(res: dict, scale: int, batches: int, pcie: PcieCounter) -> None:
    from rmat_fixture import RMatParams, load_or_build_rmat

    from graphtier.service.gpu.gather import CudaFeatureTiers, CudaGather
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.hotness import ScoreSpec, compute_scores, reorder_by_score
    from graphtier.service.memory.device_ipc import DeviceAllocation
    from graphtier.service.sampling import NeighborSampler
    from graphtier.service.shm import SegmentOwner

    t0 = time.perf_counter()
    graph = load_or_build_rmat(RMatParams(scale=scale))
    n = graph.num_nodes
    gen = torch.Generator().manual_seed(0)
    train = torch.randperm(n, generator=gen)[: n // 10]
    scores = compute_scores(graph, ScoreSpec(kind="wrpr"), train_ids=train)
    reordering = reorder_by_score(graph, scores)
    train_new = reordering.old_to_new[train]
    sampler = NeighborSampler(reordering.graph, [15, 10, 5])
    perm = train_new[torch.randperm(train_new.numel(), generator=gen)]
    streams = [sampler.sample(perm[i * 1024 : (i + 1) * 1024], seed=i).node_ids for i in range(batches)]
    res["tiering_graph"] = f"R-MAT scale {scale}: {n} nodes, {graph.num_edges} edges; {batches} batches"
    res["tiering_setup_s"] = round(time.perf_counter() - t0, 1)
    row_bytes = 512
    owner = SegmentOwner()
    reg = alloc = None
    try:
        _, host = owner.create_tensor("bench-rmat-features", (n, row_bytes // 4), torch.float32)
        fill_distinct(host)
        reg = host_registry().register(host.data_ptr(), host.numel() * 4, "bench rmat features", read_only=False)
        rep_rows = n // 10
        alloc = DeviceAllocation(0, rep_rows * row_bytes, "bench replicated tier")
        alloc.copy_from_host(0, host.data_ptr(), rep_rows * row_bytes)
        out = torch.empty((max(s.numel() for s in streams), row_bytes // 4), device="cuda")
        device_streams = [s.cuda() for s in streams]
        for label, rep in (("0pct", 0), ("10pct", rep_rows)):
            tiers = CudaFeatureTiers(
                device=torch.device("cuda", 0),
                replicated_end=rep,
                interleaved_end=rep,
                host_end=n,
                num_rows=n,
                num_devices=1,
                device_index=0,
                dtype=torch.float32,
                row_shape=(row_bytes // 4,),
                replicated_ptr=alloc.ptr if rep else 0,
                interleaved_ptrs=(0,),
                host_ptr=host.data_ptr(),
            )
            gather = CudaGather(tiers)
            host_bytes = 0
            for ids in streams:  # warm-up and the accounted bytes
                host_bytes += gather.gather(ids, out).host.bytes
            torch.cuda.synchronize()
            before = pcie.read()
            t = timed(lambda gather=gather: [gather.gather(ids, out) for ids in device_streams], reps=3)
            torch.cuda.synchronize()
            time.sleep(1.2)
            after = pcie.read()
            res[f"tiering_{label}_host_bytes_per_pass"] = host_bytes
            res[f"tiering_{label}_gather_s_per_pass"] = round(t, 4)
            if before and after:
                res[f"tiering_{label}_nvml_rx_vs_accounted"] = round((after[0] - before[0]) / (4 * host_bytes), 3)
            check = streams[0][:2048]
            gather.gather(check, out)
            assert torch.equal(out[:2048].cpu(), host[check]), f"tiering {label}: wrong rows"
        res["tiering_10pct_pcie_bytes_vs_0pct"] = round(
            res["tiering_10pct_host_bytes_per_pass"] / res["tiering_0pct_host_bytes_per_pass"], 3
        )
        res["tiering_10pct_speedup_vs_0pct"] = round(
            res["tiering_0pct_gather_s_per_pass"] / res["tiering_10pct_gather_s_per_pass"], 3
        )
        sampling_section(res, reordering.graph, perm, batches, host)
    finally:
        if alloc is not None:
            alloc.close()
        if reg is not None:
            host_registry().release(reg)
        owner.close()


def sampling_section(res: dict, graph, perm: torch.Tensor, batches: int, host: torch.Tensor) -> None:
    """Section 5 (see the module docstring), over the tiering section's graph, seeds and host features."""
    from graphtier.service.gpu.batch_stream import DeviceBatchMaker
    from graphtier.service.gpu.gather import CudaFeatureTiers, CudaGather
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.gpu.sampler import CudaNeighborSampler, StructureTiers
    from graphtier.service.gpu.views import cuda_view
    from graphtier.service.placement import PlacementPlan, TierBudgets
    from graphtier.service.sampling import NeighborSampler

    fanouts, n = [15, 10, 5], graph.num_nodes
    seeds = [perm[i * 1024 : (i + 1) * 1024] for i in range(batches)]
    cpu = NeighborSampler(graph, fanouts)
    cpu.sample(seeds[0], seed=0)
    t0 = time.perf_counter()
    for i, batch in enumerate(seeds):
        cpu.sample(batch, seed=i)
    cpu_rate = batches / (time.perf_counter() - t0)
    res["cpu_sampler_batches_per_s"] = round(cpu_rate, 1)
    res["cpu_sampler_threads"] = torch.get_num_threads()
    want = cpu.sample(seeds[1], seed=1)
    regs = [
        host_registry().register(t.data_ptr(), t.numel() * 8, f"bench {name}", read_only=False)
        for name, t in (("colptr", graph.colptr), ("row", graph.row))
    ]
    try:
        host_colptr = cuda_view(graph.colptr.data_ptr(), (n + 1,), torch.int64, 0, owner=graph.colptr)
        host_row = cuda_view(graph.row.data_ptr(), (graph.num_edges,), torch.int64, 0, owner=graph.row)
        structure_bytes = 8 * (n + 1 + graph.num_edges)
        quarter = PlacementPlan.from_budgets(
            TierBudgets(num_devices=1, structure_device_bytes=structure_bytes // 4),
            num_nodes=n,
            row_bytes=0,
            colptr=graph.colptr,
        ).structure_device_end
        device_seeds = [batch.cuda() for batch in seeds]
        structures = {}
        for label, end in (("host_only", 0), ("structure_25pct", quarter), ("structure_all", n)):
            edges = int(graph.colptr[end])
            structure = StructureTiers(
                device_colptr=graph.colptr[: end + 1].cuda(),
                device_row=graph.row[:edges].cuda(),
                host_colptr=host_colptr,
                host_row=host_row,
            )
            structures[label] = structure
            sampler = CudaNeighborSampler(structure, fanouts)
            got = sampler.sample(seeds[1], seed=1)
            same = all(torch.equal(getattr(got, k).cpu(), getattr(want, k)) for k in ("node_ids", "indptr", "indices"))
            assert same, f"GPU sampler ({label}) differs from the CPU sampler"
            t = timed(lambda s=sampler: [s.sample(b, seed=i) for i, b in enumerate(device_seeds)], reps=3)
            res[f"gpu_sampler_{label}_batches_per_s"] = round(batches / t, 1)
            res[f"gpu_sampler_{label}_vs_cpu_sampler"] = round(batches / t / cpu_rate, 2)
        res["gpu_sampler_structure_25pct_device_nodes"] = quarter
        row_bytes = host.shape[1] * 4
        tiers = CudaFeatureTiers(
            device=torch.device("cuda", 0),
            replicated_end=0,
            interleaved_end=0,
            host_end=n,
            num_rows=n,
            num_devices=1,
            device_index=0,
            dtype=torch.float32,
            row_shape=(host.shape[1],),
            replicated_ptr=0,
            interleaved_ptrs=(0,),
            host_ptr=host.data_ptr(),
        )
        gather = CudaGather(tiers)
        maker = DeviceBatchMaker(CudaNeighborSampler(structures["structure_25pct"], fanouts), gather)
        out = torch.empty((n if n < 4 << 20 else 4 << 20, host.shape[1]), device="cuda")
        t = timed(lambda: [maker.make(b, seed=i, out=out) for i, b in enumerate(device_seeds)], reps=3)
        rows = gather.take_counts().host.rows
        res["one_stream_batches_per_s"] = round(batches / t, 1)
        res["one_stream_vs_cpu_sampler"] = round(batches / t / cpu_rate, 2)
        res["one_stream_host_gib_per_s"] = round(rows / 4 * row_bytes / t / GiB, 2)  # 4 passes: warm-up + 3
    finally:
        torch.cuda.synchronize()
        for reg in regs:
            host_registry().release(reg)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host-gib", type=float, default=8.0, help="size of the host table (default 8 GiB)")
    parser.add_argument("--scale", type=int, default=22, help="R-MAT scale of the tiering section (default 22)")
    parser.add_argument("--batches", type=int, default=40, help="sampled batches in the tiering section")
    parser.add_argument("--skip-tiering", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu_gather: no CUDA device visible to torch; run it on a GPU machine", file=sys.stderr)
        return 2
    torch.set_num_threads(os.cpu_count() or 1)
    props = torch.cuda.get_device_properties(0)
    res: dict = {
        "machine": f"{props.name}, {props.multi_processor_count} SMs, {cpu_model()}, torch {torch.__version__}"
    }
    pcie = PcieCounter()
    for section in (
        lambda: host_tier_section(res, args.host_gib, pcie),
        lambda: device_tier_section(res),
        None if args.skip_tiering else lambda: tiering_section(res, args.scale, args.batches, pcie),
    ):
        if section is None:
            continue
        try:
            section()
        except Exception as exc:  # print what was measured, then the failure
            res[f"error_{len(res)}"] = f"{type(exc).__name__}: {exc}"[:400]
        print(json.dumps(res), flush=True)
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    width = max(len(k) for k in res)
    for key, value in res.items():
        print(f"{key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
