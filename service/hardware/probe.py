"""The checks that initialise CUDA: host-memory registration, the peer-access matrix, SM counts.

`graphtier doctor` runs them in its own process. The daemon must not (a process that has
initialised CUDA cannot fork children that use it), so it runs `python -m
graphtier.service.hardware.probe` with a timeout and reads its JSON (`probe_in_subprocess`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys
import threading
import time
from typing import Any

from graphtier.contract.machine import CheckResult, _Model
from graphtier.service.gpu.views import cuda_view

HOST_REGISTER_PORTABLE, HOST_REGISTER_MAPPED, HOST_REGISTER_READ_ONLY = 0x1, 0x2, 0x8
PROBE_BYTES = 2 << 20


class CudaDeviceFacts(_Model):
    """One CUDA ordinal as torch sees it, with what identifies it to NVML."""

    cuda_index: int
    name: str
    uuid: str | None
    pci: tuple[int, int, int] | None = None  # (domain, bus, device)
    sm_count: int
    compute_capability: str
    total_memory_bytes: int


class CudaProbe(_Model):
    """What the probe found; `checks` holds host_register and peer_access."""

    devices: list[CudaDeviceFacts]
    peer_access: list[list[bool]] | None
    checks: list[CheckResult]


def _without(reason: str, status: str = "unavailable") -> CudaProbe:
    checks = [CheckResult(name=n, status=status, reason=reason) for n in ("host_register", "peer_access")]
    return CudaProbe(devices=[], peer_access=None, checks=checks)


def _error_text(cudart: Any, err: Any) -> str:
    code = int(err)
    try:
        return f"{cudart.cudaGetErrorString(err)} (cudaError {code})"
    except Exception:  # the binding may refuse an error it has no enum member for
        return f"cudaError {code}"


def _device_pointer(ptr: int) -> tuple[int | None, str | None]:
    """cuMemHostGetDevicePointer of a registered host address, or (None, why not)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return None, f"cannot load the driver library ({exc})"
    out = ctypes.c_uint64()
    fn = libcuda.cuMemHostGetDevicePointer_v2
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
    rc = fn(ctypes.byref(out), ctypes.c_void_p(ptr), 0)
    if rc != 0:
        text = ctypes.c_char_p()
        libcuda.cuGetErrorString(rc, ctypes.byref(text))
        return None, f"cuMemHostGetDevicePointer: {(text.value or b'?').decode()} (CUresult {rc})"
    return out.value, None


def _register_and_read(torch: Any, cudart: Any, mapping: mmap.mmap, flags: int, expected: Any) -> dict[str, Any]:
    """Register `mapping`, read it on the device through a view at the host address, unregister."""
    import numpy as np

    array = np.frombuffer(mapping, dtype=np.uint8)
    ptr = int(array.ctypes.data)
    try:
        start = time.perf_counter()
        err = cudart.cudaHostRegister(ptr, PROBE_BYTES, flags)
        seconds = time.perf_counter() - start
        if int(err) != 0:
            return {"ok": False, "error": f"cudaHostRegister(flags={flags:#x}): {_error_text(cudart, err)}"}
        try:
            view = cuda_view(ptr, (PROBE_BYTES,), torch.uint8, torch.cuda.current_device())
            same = torch.equal(view, expected)  # a kernel reads the host pages at the host address
            dptr, why = _device_pointer(ptr)
            out = {
                "ok": same,
                "register_seconds": seconds,
                "view_data_ptr_equal": view.data_ptr() == ptr,
                "device_pointer_equal": None if dptr is None else dptr == ptr,
            }
            if why:
                out["device_pointer_error"] = why
            if not same:
                out["error"] = "a kernel reading through the view saw different bytes than the host wrote"
            return out
        finally:
            torch.cuda.synchronize()
            cudart.cudaHostUnregister(ptr)
    except Exception as exc:  # torch refusing the view names the problem: report it, never raise
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        del array


def check_host_register(torch: Any) -> CheckResult:
    """mmap a small /dev/shm file, register it (mapped | portable, then read-only) and read it on the device."""
    import numpy as np

    cudart = torch.cuda.cudart()
    path = f"/dev/shm/graphtier-probe-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.unlink(path)  # the mappings keep the pages; nothing is left behind
        os.ftruncate(fd, PROBE_BYTES)
        pattern = (np.arange(PROBE_BYTES, dtype=np.int64) % 251).astype(np.uint8)
        os.pwrite(fd, pattern.tobytes(), 0)
        expected = torch.from_numpy(pattern).cuda()
        with mmap.mmap(fd, PROBE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as writable:
            mapped = _register_and_read(
                torch, cudart, writable, HOST_REGISTER_MAPPED | HOST_REGISTER_PORTABLE, expected
            )
        read_only: dict[str, Any] = {"ok": False, "error": "not tried: mapped | portable failed"}
        if mapped["ok"]:
            with mmap.mmap(fd, PROBE_BYTES, mmap.MAP_SHARED, mmap.PROT_READ) as readable:
                flags = HOST_REGISTER_MAPPED | HOST_REGISTER_PORTABLE | HOST_REGISTER_READ_ONLY
                read_only = _register_and_read(torch, cudart, readable, flags, expected)
    except OSError as exc:
        return CheckResult(name="host_register", status="failed", reason=f"{path}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    details = {"bytes": PROBE_BYTES, "mapped_portable": mapped, "read_only": read_only}
    if not mapped["ok"]:
        return CheckResult(
            name="host_register",
            status="failed",
            details=details,
            reason=f"registered /dev/shm memory is not usable from the device: {mapped['error']}",
        )
    ro = "read-only registration ok" if read_only["ok"] else f"read-only registration failed: {read_only['error']}"
    equal = {
        True: "device pointer == host pointer",
        False: "device pointer != host pointer (no UVA?)",
        None: "device pointer not checked",
    }[mapped["device_pointer_equal"]]
    return CheckResult(
        name="host_register",
        status="ok",
        details=details,
        reason=f"a kernel reads registered /dev/shm memory at its host address ({equal}); {ro}",
    )


def check_peer_access(torch: Any, count: int) -> tuple[CheckResult, list[list[bool]]]:
    """The CUDA peer-access matrix (cudaDeviceCanAccessPeer) over every visible ordinal."""
    matrix = [[i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(count)] for i in range(count)]
    pairs = [(i, j) for i in range(count) for j in range(count) if i != j]
    missing = [f"{i}->{j}" for i, j in pairs if not matrix[i][j]]
    details = {"devices": count, "missing": missing}
    if not pairs:
        return CheckResult(
            name="peer_access", status="unavailable", details=details, reason="one CUDA device: no peer to access"
        ), matrix
    if len(missing) == len(pairs):
        return CheckResult(
            name="peer_access",
            status="unavailable",
            details=details,
            reason=f"no pair of the {count} devices can access each other",
        ), matrix
    tail = f"; not {', '.join(missing)}" if missing else ""
    return CheckResult(
        name="peer_access",
        status="ok",
        details=details,
        reason=f"{len(pairs) - len(missing)} of {len(pairs)} device pairs have peer access{tail}",
    ), matrix


def _facts(torch: Any, index: int) -> CudaDeviceFacts:
    p = torch.cuda.get_device_properties(index)
    pci = (p.pci_domain_id, p.pci_bus_id, p.pci_device_id) if hasattr(p, "pci_bus_id") else None
    uuid = str(p.uuid) if getattr(p, "uuid", None) is not None else None
    return CudaDeviceFacts(
        cuda_index=index,
        name=p.name,
        uuid=uuid,
        pci=pci,
        sm_count=p.multi_processor_count,
        compute_capability=f"{p.major}.{p.minor}",
        total_memory_bytes=p.total_memory,
    )


def run_cuda_probe() -> CudaProbe:
    """Every CUDA-initialising check, in this process; never raises for what the machine lacks."""
    import torch

    if torch.version.cuda is None:
        return _without(f"torch {torch.__version__} is built without CUDA")
    try:
        torch.cuda.init()
        count = torch.cuda.device_count()
    except Exception as exc:  # torch says why (no driver, driver too old, ...)
        return _without(f"CUDA cannot initialise: {exc}".strip())
    if count == 0:
        return _without("CUDA initialised but sees no device (CUDA_VISIBLE_DEVICES?)")
    devices = [_facts(torch, i) for i in range(count)]
    torch.cuda.set_device(0)
    host = check_host_register(torch)
    peer, matrix = check_peer_access(torch, count)
    return CudaProbe(devices=devices, peer_access=matrix, checks=[host, peer])


def probe_in_subprocess(timeout_s: float, cancel: threading.Event | None = None) -> CudaProbe:
    """`run_cuda_probe` in a child interpreter, so this process never initialises CUDA; the child is
    killed when it runs past `timeout_s` or `cancel` is set (the daemon stopping)."""
    argv = [sys.executable, "-m", "graphtier.service.hardware.probe"]
    try:
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    except OSError as exc:
        return _without(f"cannot run the CUDA probe ({exc})", "failed")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out, err = child.communicate(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline or (cancel is not None and cancel.is_set()):
                child.kill()
                child.communicate()
                why = "cancelled" if cancel is not None and cancel.is_set() else f"still running after {timeout_s:g} s"
                return _without(f"the CUDA probe (pid {child.pid}) was killed: {why}", "failed")
    if child.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return _without(f"the CUDA probe exited with status {child.returncode}: {tail[0]}", "failed")
    try:
        return CudaProbe.model_validate_json(out)
    except ValueError as exc:
        return _without(f"the CUDA probe printed something unreadable: {exc}", "failed")


if __name__ == "__main__":
    sys.stdout.write(run_cuda_probe().model_dump_json() + "\n")
