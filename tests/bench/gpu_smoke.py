"""The GPU data path's primitives, each checked on its own in a fresh process: one line each, works or
refused (with the error), so that one failure on a new GPU machine is diagnosed in one run instead of
masking everything after it.

    python3 tests/bench/gpu_smoke.py [--json FILE] [--only NAME,...] [--timeout S] [--jobs N] [--dry-run]

Checks, in order (`--only` picks some):
  versions          driver, torch and its CUDA, nvcc, cuda-bindings, the GPU, the read-only host
                    registration attribute, VMM fd support, MPS tools (torch and cuda-bindings only:
                    it runs before graphtier's dependencies are installed)
  host-register-ro  a sealed, read-only mapped segment registered read-only and read on the GPU in place
  host-register-rw  a writable mapping registered read-write and read on the GPU in place
  ipc-memory        device memory shared by CUDA IPC handle and read by a child process
  ipc-events        interprocess events: a child's recorded work waited on here, and this process's by the child
  vmm               device memory exported as a VMM fd, imported and read by a child process
  gather            one GPU tiered gather against the CPU gather (replicated, interleaved, host, storage rows)
  sampler           one GPU sampler batch against the CPU sampler, bit for bit
  device-slot       a producer's device slot read by a second process as a view, with no host-to-device copy

Each check runs as `gpu_smoke.py --run-check NAME` with its own time limit (a hang or a crash refuses
that check alone), up to `--jobs` at once. `--dry-run` runs the same harness with every check a no-op
(no CUDA, no torch: the plumbing of tests/bench/gpu_check.sh --dry-run). The JSON holds, per check,
its status, detail or error, and seconds. Exit status: 0 when the GPU is usable (versions works), 1
when not, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
RESULT_PREFIX = "gpu-smoke-result: "
SLEEP_S = 0.5  # the work an ipc-events check orders: long enough that a wait which did not wait shows


# -- the checks (each runs in its own process; returns its detail line, raises when refused) ------------


def _nvcc() -> str | None:
    import shutil

    found = shutil.which("nvcc")
    if found:
        return found
    for candidate in ("/usr/local/cuda/bin/nvcc",):
        if os.path.exists(candidate):
            return candidate
    return None


def check_versions() -> str:
    import importlib.metadata
    import re
    import shutil

    import torch

    facts = [f"torch {torch.__version__} (CUDA {torch.version.cuda})"]
    nvcc = _nvcc()
    nvcc_release = None
    if nvcc:
        text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
        found = re.search(r"release (\d+\.\d+)", text)
        nvcc_release = found.group(1) if found else "?"
    facts.append(f"nvcc {nvcc_release or 'not found'}")
    if torch.version.cuda and nvcc_release and torch.version.cuda.split(".")[0] != nvcc_release.split(".")[0]:
        facts.append("MISMATCH: torch's CUDA major is not nvcc's, so the GPU ops are not built")
    try:
        facts.append(f"cuda-bindings {importlib.metadata.version('cuda-bindings')}")
    except importlib.metadata.PackageNotFoundError:
        facts.append("cuda-bindings not installed")
    smi = shutil.which("nvidia-smi")
    if smi:
        query = [smi, "--query-gpu=driver_version", "--format=csv,noheader"]
        line = subprocess.run(query, capture_output=True, text=True, check=False).stdout.strip().splitlines()
        facts.insert(0, f"driver {line[0] if line else '?'}")
    facts.append(f"MPS tools {'yes' if shutil.which('nvidia-cuda-mps-control') else 'no'}")
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device; " + ", ".join(facts))
    props = torch.cuda.get_device_properties(0)
    facts.append(f"{torch.cuda.device_count()} x {props.name} sm_{props.major}{props.minor}")
    from cuda.bindings import driver
    from cuda.bindings import runtime as rt

    err, version = rt.cudaDriverGetVersion()
    facts.append(f"driver CUDA {version // 1000}.{version % 1000 // 10}" if err == 0 else f"driver version {err!r}")
    attr = rt.cudaDeviceAttr.cudaDevAttrHostRegisterReadOnlySupported
    err, read_only = rt.cudaDeviceGetAttribute(attr, 0)
    facts.append(f"read-only host registration {read_only if err == 0 else repr(err)}")
    (err,) = driver.cuInit(0)
    vmm = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
    err, fds = driver.cuDeviceGetAttribute(vmm, 0)
    facts.append(f"VMM fds {fds if err == 0 else repr(err)}")
    return ", ".join(facts)


def _child(code: str, *args: str, timeout: float = 60) -> dict:
    """Run `code` in a fresh interpreter; its last stdout line as JSON (RuntimeError with its stderr if it fails)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"the child process failed (exit {done.returncode}): {_last_line(done.stderr)}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _host_register(read_only: bool) -> str:
    import torch

    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.gpu.views import cuda_view
    from graphtier.service.shm import SegmentOwner, attach_tensor

    values = torch.randn(1 << 18)
    with SegmentOwner() as owner:
        segment, writable = owner.create_tensor("gpu-smoke-host", tuple(values.shape), values.dtype)
        writable.copy_(values)
        ref = segment.ref_for(writable)
        mapping = writable
        if read_only:
            segment.seal()
            mapping = attach_tensor(ref)  # the consumers' mapping: PROT_READ
        nbytes = mapping.numel() * mapping.element_size()
        t0 = time.perf_counter()
        reg = host_registry().register(mapping.data_ptr(), nbytes, "gpu smoke rows", read_only=read_only)
        seconds = time.perf_counter() - t0
        try:
            view = cuda_view(mapping.data_ptr(), tuple(mapping.shape), mapping.dtype, 0, owner=mapping)
            same = torch.equal((view * 1).cpu(), values)  # a kernel reads the host pages, then a copy back
            torch.cuda.synchronize()
        finally:
            host_registry().release(reg)
    if not same:
        raise RuntimeError("the GPU read other bytes than the mapping holds")
    return f"{nbytes >> 20} MiB registered in {seconds * 1e3:.1f} ms and read in place"


def check_host_register_ro() -> str:
    return _host_register(read_only=True)


def check_host_register_rw() -> str:
    return _host_register(read_only=False)


OPEN_CHILD = """
import json, sys, torch
from graphtier.service.memory import MemoryHandle, Region, open_memory
memory = open_memory(MemoryHandle.model_validate_json(sys.argv[1]), device=0)
view = memory.view(Region(offset=0, shape=(int(sys.argv[2]),), dtype="float32"))
print(json.dumps({"sum": float(view.double().sum()), "device": str(view.device)}))
memory.close()
"""


def _device_memory(mode: str) -> str:
    import torch

    from graphtier.service.memory import FdExporter, allocate, copy_host_to_device

    values = torch.arange(1 << 16, dtype=torch.float32)
    with tempfile.TemporaryDirectory(prefix="gtsmoke-", dir="/tmp") as where, FdExporter(f"{where}/m.sock") as fds:
        memory = allocate(f"gpu-smoke-{mode}", values.nbytes, device=0, mode=mode, exporter=fds)  # type: ignore[arg-type]  # the mode as the loop names it
        try:
            copy_host_to_device(memory, 0, values)
            torch.cuda.synchronize()
            got = _child(OPEN_CHILD, memory.handle.model_dump_json(), str(values.numel()))
        finally:
            memory.close()
    if got != {"sum": float(values.double().sum()), "device": "cuda:0"}:
        raise RuntimeError(f"the child read {got}, not the {values.numel()} values written")
    return f"{values.nbytes >> 10} KiB written here, the same bytes read by a child process"


def check_ipc_memory() -> str:
    return _device_memory("ipc")


def check_vmm() -> str:
    from graphtier.service.memory.device_vmm import vmm_supported

    if not vmm_supported(0):
        raise RuntimeError("GPU 0 reports no POSIX fd handle support (CU_DEVICE_ATTRIBUTE_..._POSIX_FILE_DESCRIPTOR)")
    return _device_memory("vmm")


EVENTS_CHILD = """
import json, sys, time, torch
from graphtier.service.pipeline.ordering import CudaEventOrdering
ordering = CudaEventOrdering.open(0, [(sys.argv[1], sys.argv[2])])
cycles = int(sys.argv[3])
torch.cuda._sleep(cycles)  # work the owner must wait for
ordering.after_read(0)  # "released", recorded after it on this process's stream
print("recorded", flush=True)
sys.stdin.readline()  # the owner recorded "ready" after work of its own
t0 = time.perf_counter()
ordering.before_read(0)
torch.cuda.current_stream().synchronize()
print(json.dumps({"waited_s": time.perf_counter() - t0}), flush=True)
ordering.close()
"""


def _sleep_cycles(seconds: float) -> int:
    """GPU clock cycles that last about `seconds` at the GPU's top clock (longer at a lower one)."""
    from cuda.bindings import runtime as rt

    err, khz = rt.cudaDeviceGetAttribute(rt.cudaDeviceAttr.cudaDevAttrClockRate, 0)
    return int(seconds * (khz * 1e3 if err == 0 and khz else 2e9))


def check_ipc_events() -> str:
    import torch

    from graphtier.service.pipeline.ordering import CudaEventOrdering

    ordering = CudaEventOrdering.create(0, 1)
    cycles = _sleep_cycles(SLEEP_S)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(EVENTS_CHILD), *ordering.event_handles(0), str(cycles)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        if child.stdout.readline().strip() != "recorded":
            raise RuntimeError(f"the child did not record its event: {_last_line(child.stderr.read())}")
        t0 = time.perf_counter()
        ordering.before_fill(0)  # this stream waits for the child's "released"
        torch.cuda.current_stream().synchronize()
        here = time.perf_counter() - t0
        torch.cuda._sleep(cycles)
        ordering.after_fill(0)  # "ready", after this process's work
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        if child.wait(timeout=60) != 0 or not line:
            raise RuntimeError(f"the child failed waiting for this process's event: {_last_line(child.stderr.read())}")
        there = json.loads(line)["waited_s"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        ordering.close()
    floor = SLEEP_S / 4
    if here < floor or there < floor:
        raise RuntimeError(
            f"a wait did not wait: here {here:.3f} s for the child's {SLEEP_S:g} s of work, there {there:.3f} s"
        )
    return f"waited {here:.2f} s here for a child's recorded work, {there:.2f} s in the child for this process's"


def check_gather() -> str:
    import torch

    from graphtier.service.gather import FeatureTiers, tiered_gather
    from graphtier.service.gpu.gather import CudaFeatureTiers, CudaGather, load_cuda_ops

    load_cuda_ops()
    rows, rep, inter, host_end = 6000, 600, 1800, 4800
    table = torch.randn((rows, 128), generator=torch.Generator().manual_seed(1))  # 512 B rows
    replicated = table[:rep].cuda()
    share = table[rep:inter].cuda()  # the interleaved tier of one GPU: every row its own
    host = table[:host_end].pin_memory()  # the host copy of the resident rows, read in place (UVA)
    storage = table[host_end:].clone()
    tiers = CudaFeatureTiers(
        device=torch.device("cuda", 0),
        replicated_end=rep,
        interleaved_end=inter,
        host_end=host_end,
        num_rows=rows,
        num_devices=1,
        device_index=0,
        dtype=table.dtype,
        row_shape=(128,),
        replicated_ptr=replicated.data_ptr(),
        interleaved_ptrs=(share.data_ptr(),),
        host_ptr=host.data_ptr(),
        storage=storage,
    )
    ids = torch.randint(0, rows, (8192,), generator=torch.Generator().manual_seed(2))
    expected = torch.empty((ids.numel(), 128))
    cpu = FeatureTiers.from_table(table, replicated_end=rep, interleaved_end=inter, host_end=host_end, num_devices=1)
    want = tiered_gather(ids, cpu, expected, backend="torch")
    out = torch.full((ids.numel(), 128), float("nan"), device="cuda")
    got = CudaGather(tiers).gather(ids, out)
    torch.cuda.synchronize()
    if not torch.equal(out.cpu(), expected):
        raise RuntimeError("the GPU gather's rows differ from the CPU gather's")
    if got.by_source() != want.by_source():
        raise RuntimeError(f"the GPU gather counted {got.by_source()}, the CPU gather {want.by_source()}")
    counted = ", ".join(f"{source} {t.rows}" for source, t in got.by_source().items() if t.rows)
    return f"{ids.numel()} rows of 512 B bit-identical to the CPU gather ({counted})"


def check_sampler() -> str:
    import torch

    sys.path.insert(0, str(REPO / "tests" / "service" / "gpu"))
    from sampler_emulation import skewed_graph, tiered

    from graphtier.service.gpu.gather import load_cuda_ops
    from graphtier.service.gpu.sampler import CudaNeighborSampler, StructureTiers
    from graphtier.service.sampling import NeighborSampler

    load_cuda_ops()
    graph = skewed_graph(20_000, 400_000, seed=3, isolated=500)
    cpu_tiers = tiered(graph, 2_000)
    on_gpu = StructureTiers(  # the host copy on the device too: this checks the kernels, not host reads
        device_colptr=cpu_tiers.device_colptr.cuda(),
        device_row=cpu_tiers.device_row.cuda(),
        host_colptr=cpu_tiers.host_colptr.cuda(),
        host_row=cpu_tiers.host_row.cuda(),
    )
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(0))[:1024]
    got = CudaNeighborSampler(on_gpu, [15, 10, 5]).sample(seeds, seed=7)
    want = NeighborSampler(graph, [15, 10, 5]).sample(seeds, seed=7)
    for name in ("node_ids", "indptr", "indices"):
        if not torch.equal(getattr(got, name).cpu(), getattr(want, name)):
            raise RuntimeError(f"the GPU sampler's {name} differ from the CPU sampler's")
    if got.num_nodes_per_hop != want.num_nodes_per_hop:
        raise RuntimeError(f"nodes per hop {got.num_nodes_per_hop} on the GPU, {want.num_nodes_per_hop} on the CPU")
    return f"1024 seeds, fanout 15,10,5: {want.num_nodes} nodes, {want.num_edges} edges, bit-identical"


SLOT_CHILD = """
import json, sys, torch
from graphtier.service.pipeline.layout import SlotLayout
from graphtier.service.pipeline.slots import attach_slot
views = attach_slot(SlotLayout.model_validate_json(sys.argv[1]), device=0)
view_ptr, slot_ptr = views.features.data_ptr(), views.memory.ptr + views.layout.features.offset
copies, profiled = [], "profiler"
try:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        total = float(views.features.double().sum())
        torch.cuda.synchronize()
    copies = [e.name for e in prof.events() if "HtoD" in e.name]
except Exception as exc:  # the profiler may be refused on this machine: the pointer check still holds
    total, profiled = float(views.features.double().sum()), f"no profiler ({type(exc).__name__})"
print(json.dumps({"sum": total, "view": view_ptr == slot_ptr, "copies": copies, "profiled": profiled}))
views.memory.close()
"""


def check_device_slot() -> str:
    import torch

    from graphtier.service.memory import FdExporter
    from graphtier.service.pipeline.layout import SlotCapacity
    from graphtier.service.pipeline.slots import create_slot
    from graphtier.service.shm import SegmentOwner

    mode = os.environ.get("GPU_SMOKE_DEVICE_MEMORY", "ipc")
    values = torch.randn((1024, 128), generator=torch.Generator().manual_seed(5))
    with tempfile.TemporaryDirectory(prefix="gtsmoke-", dir="/tmp") as where, FdExporter(f"{where}/m.sock") as fds:
        with SegmentOwner() as owner:
            views = create_slot(
                owner,
                channel="gpu-smoke",
                index=0,
                generation=0,
                capacity=SlotCapacity(nodes=1024, edges=4096, expanded=2048),
                batch_size=64,
                feature_shape=(128,),
                device=0,
                device_memory=mode,  # type: ignore[arg-type]  # the mode as the loop names it
                exporter=fds,
            )
            try:
                assert views.features is not None
                views.features.copy_(values.cuda())
                torch.cuda.synchronize()
                got = _child(SLOT_CHILD, views.layout.model_dump_json())
            finally:
                views.memory.close()
    if abs(got["sum"] - float(values.double().sum())) > 1e-6 * values.numel():
        raise RuntimeError(f"the second process read a sum of {got['sum']}, not the slot's {float(values.sum())}")
    if not got["view"]:
        raise RuntimeError("the second process's features are not a view of the slot's memory")
    if got["copies"]:
        raise RuntimeError(f"the second process copied from the host: {got['copies']}")
    return f"{mode} slot read by a second process as a view, no host-to-device copy ({got['profiled']})"


CHECKS: dict[str, Callable[[], str]] = {
    "versions": check_versions,
    "host-register-ro": check_host_register_ro,
    "host-register-rw": check_host_register_rw,
    "ipc-memory": check_ipc_memory,
    "ipc-events": check_ipc_events,
    "vmm": check_vmm,
    "gather": check_gather,
    "sampler": check_sampler,
    "device-slot": check_device_slot,
}


# -- the harness ----------------------------------------------------------------------------------------------


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:400] if lines else "(no output)"


def run_check(name: str, dry_run: bool) -> int:
    """In the check's own process: run it, print its result line (the harness reads the last one)."""
    t0 = time.perf_counter()
    try:
        detail = "dry run: not run" if dry_run else CHECKS[name]()
        result = {"status": "works", "detail": detail}
    except Exception as exc:  # any failure is this primitive's refusal, and is shown
        result = {"status": "refused", "error": f"{type(exc).__name__}: {str(exc).strip()}"[:600]}
    result["seconds"] = round(time.perf_counter() - t0, 2)
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


def _spawn(name: str, timeout: float, dry_run: bool) -> dict:
    t0 = time.perf_counter()
    command = [sys.executable, str(Path(__file__).resolve()), "--run-check", name, *(["--dry-run"] if dry_run else [])]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"status": "refused", "error": f"timed out after {timeout:g} s", "seconds": round(timeout, 2)}
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if not lines:
        error = f"its process died (exit {done.returncode}): {_last_line(done.stderr)}"
        return {"status": "refused", "error": error, "seconds": round(time.perf_counter() - t0, 2)}
    return json.loads(lines[-1].removeprefix(RESULT_PREFIX))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument("--only", help=f"comma-separated checks (default all: {','.join(CHECKS)})")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per check (default 60)")
    parser.add_argument("--jobs", type=int, default=4, help="checks run at once (default 4)")
    parser.add_argument("--dry-run", action="store_true", help="the harness alone: every check a no-op")
    parser.add_argument("--run-check", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run_check:
        if args.run_check not in CHECKS:
            parser.error(f"unknown check {args.run_check!r}")
        return run_check(args.run_check, args.dry_run)
    names = args.only.split(",") if args.only else list(CHECKS)
    unknown = [n for n in names if n not in CHECKS]
    if unknown or args.jobs < 1 or args.timeout <= 0:
        parser.error(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}" if unknown else "--jobs/--timeout > 0")
    t0 = time.perf_counter()
    results: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {name: pool.submit(_spawn, name, args.timeout, args.dry_run) for name in names}
        for name in names:  # printed in order, each as soon as it and those before it are done
            results[name] = result = futures[name].result()
            said = result.get("detail") if result["status"] == "works" else result.get("error")
            print(f"smoke {name:<17} {result['status']:<8} {said}  [{result['seconds']:.1f} s]", flush=True)
    summary = {"seconds": round(time.perf_counter() - t0, 2), "dry_run": args.dry_run, "checks": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    works = sum(r["status"] == "works" for r in results.values())
    print(f"smoke: {works} of {len(results)} work, in {summary['seconds']:.1f} s", flush=True)
    return 0 if results.get("versions", {"status": "works"})["status"] == "works" else 1


if __name__ == "__main__":
    raise SystemExit(main())
