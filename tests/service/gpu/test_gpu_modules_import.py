"""Every module of the GPU data path -- graphtier.service.gpu and graphtier.service.memory (found by
walking the packages, so a new module is covered without editing this file), the device tiers and
the slot ordering -- imports on any machine, importing touches no CUDA, and without a GPU each entry
point says why it cannot run (CudaError) instead of failing obscurely. The CPU-side logic (tier
validation, traffic accounting) is exercised here on the CPU."""

from __future__ import annotations

import ctypes
import importlib
import json
import pkgutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

import graphtier.service.gpu as gpu_package
import graphtier.service.memory as memory_package
from graphtier.contract.errors import GraphtierError

PACKAGES = (gpu_package, memory_package)
ELSEWHERE = (
    "graphtier.service.store.device_tiers",
    "graphtier.service.store.tier_ref",
    "graphtier.service.pipeline.ordering",
)
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible (the GPU tests cover it)")


def _walked(package) -> set[str]:
    return {m.name for m in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")}


def _modules() -> list[str]:
    return sorted(set().union(*(_walked(p) for p in PACKAGES), ELSEWHERE))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_the_walk_finds_every_module_file(package):
    folder = Path(package.__file__).parent
    files = {
        f"{package.__name__}." + ".".join(p.relative_to(folder).with_suffix("").parts)
        for p in folder.rglob("*.py")
        if p.name != "__init__.py"
    }
    assert files and _walked(package) == files


@pytest.mark.parametrize("module", _modules())
def test_module_imports(module):
    importlib.import_module(module)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_importing_every_module_touches_no_cuda():
    """In a fresh interpreter: no cuda-python module beyond what torch itself loads, our runtime binding
    never fetched, torch's CUDA uninitialised."""
    code = (
        "import importlib, json, sys, torch\n"
        "before = set(sys.modules)\n"
        f"for name in {_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "from graphtier.service.gpu import runtime\n"
        "print(json.dumps({'cuda_modules': sorted(m for m in set(sys.modules) - before if m.split('.')[0] == 'cuda'),\n"
        "                  'runtime_fetched': sorted(runtime._state),\n"
        "                  'torch_cuda_initialized': torch.cuda.is_initialized()}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "cuda_modules": [],
        "runtime_fetched": [],
        "torch_cuda_initialized": False,
    }


@no_gpu
def test_without_a_gpu_the_device_count_is_zero_with_the_reason():
    from graphtier.service.gpu.runtime import device_count

    count, why = device_count()
    assert count == 0 and why


@no_gpu
def test_without_a_gpu_the_gpu_ops_say_why_they_cannot_load():
    from graphtier.service.gpu.gather import load_cuda_ops
    from graphtier.service.gpu.runtime import CudaError

    with pytest.raises(CudaError, match="torch sees no CUDA device"):
        load_cuda_ops()


@no_gpu
@pytest.mark.parametrize(
    ("function", "args"),
    [
        ("mem_get_info", (0,)),
        ("pci_bus_id", (0,)),
        ("can_access_peer", (0, 1)),
        ("read_only_registration_supported", (0,)),
        ("set_device", (0,)),
        ("device_of_pci_bus_id", ("0000:00:00.0",)),
    ],
)
def test_without_a_gpu_runtime_calls_raise_cuda_error(function, args):
    from graphtier.service.gpu import runtime

    with pytest.raises(runtime.CudaError) as info:
        getattr(runtime, function)(*args)
    assert str(info.value)


@no_gpu
def test_without_a_gpu_allocation_and_host_registration_raise_cuda_error_and_keep_nothing():
    from graphtier.service.gpu.host_registry import HostRegistry
    from graphtier.service.gpu.runtime import CudaError
    from graphtier.service.memory.device_ipc import DeviceAllocation

    with pytest.raises(CudaError):
        DeviceAllocation(0, 4096, "test tier")
    registry = HostRegistry()
    buffer = ctypes.create_string_buffer(1 << 16)
    with pytest.raises(CudaError):
        registry.register(ctypes.addressof(buffer), len(buffer), "test rows")
    assert registry.registrations() == []


@no_gpu
def test_without_a_gpu_device_memory_and_slot_events_raise_cuda_error():
    from graphtier.service.gpu.runtime import CudaError
    from graphtier.service.memory import FdExporter, MemoryHandle, allocate, open_memory
    from graphtier.service.pipeline.ordering import CudaEventOrdering

    with tempfile.TemporaryDirectory(prefix="gtvmm-", dir="/tmp") as where:
        with FdExporter(f"{where}/memory.sock") as exporter:
            for mode in ("ipc", "vmm"):
                with pytest.raises(CudaError):
                    allocate("test slot", 4096, device=0, mode=mode, exporter=exporter)
            assert exporter.exported() == []  # nothing half-exported
    ipc = MemoryHandle(
        location="device", mechanism="cuda_ipc", nbytes=64, owner_pid=1, ipc_handle="ab" * 64, pci_bus_id="0000:18:00.0"
    )
    with pytest.raises(CudaError):
        open_memory(ipc)
    with pytest.raises(CudaError):
        CudaEventOrdering.create(0, 2)


def test_a_bad_allocation_size_is_refused_before_cuda():
    from graphtier.service.gpu.runtime import CudaError
    from graphtier.service.memory.device_ipc import DeviceAllocation

    with pytest.raises(CudaError, match="test tier: cannot allocate 0 bytes"):
        DeviceAllocation(0, 0, "test tier")


def _tiers(**overrides):
    from graphtier.service.gpu.gather import CudaFeatureTiers

    fields = {
        "device": torch.device("cuda", 0),
        "replicated_end": 10,
        "interleaved_end": 30,
        "host_end": 50,
        "num_rows": 60,
        "num_devices": 2,
        "device_index": 0,
        "dtype": torch.float32,
        "row_shape": (4,),
        "replicated_ptr": 1,
        "interleaved_ptrs": (2, 3),
        "host_ptr": 4,
        "storage": torch.zeros(10, 4),
    }
    return CudaFeatureTiers(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"interleaved_end": 5}, "tier boundaries out of order"),
        ({"interleaved_ptrs": (2,)}, "1 interleaved shares for 2 devices"),
        ({"replicated_ptr": 0}, "the replicated tier has rows but no device address"),
        ({"host_ptr": 0}, "host rows are read but no registered host address was given"),
        ({"storage": torch.zeros(9, 4)}, "the storage tier needs a contiguous CPU tensor of 10 rows"),
    ],
)
def test_tier_description_is_validated_on_the_cpu(overrides, message):
    with pytest.raises(GraphtierError, match=message):
        _tiers(**overrides)


@pytest.mark.parametrize(("shares", "expected"), [((2, 3), [10, 10, 10, 20, 10]), ((2, 0), [10, 10, 0, 30, 10])])
def test_rows_are_counted_per_source_on_the_cpu(shares, expected):
    """replicated, local share, peer share, host, storage; an unreachable peer's rows count as host."""
    from graphtier.service.gpu.gather import count_rows

    tiers = _tiers(interleaved_ptrs=shares)
    assert tiers.row_bytes == 16
    assert count_rows(torch.arange(60), tiers) == expected


@no_gpu
def test_without_a_gpu_the_gpu_sampler_says_why_it_cannot_run():
    from graphtier.service.gpu.runtime import CudaError
    from graphtier.service.gpu.sampler import CudaNeighborSampler, StructureTiers
    from graphtier.service.graph.csc import CSCGraph

    structure = StructureTiers.host_only(CSCGraph(colptr=torch.tensor([0, 1, 1]), row=torch.tensor([1])))
    with pytest.raises(CudaError, match="torch sees no CUDA device"):
        CudaNeighborSampler(structure, [2])


def test_driver_errors_are_named_by_their_driver_names_and_values_unpacked():
    """`check_driver` reads a driver result (CUresult), which `check` (runtime codes) would misname:
    driver error 101 is CUDA_ERROR_INVALID_DEVICE, runtime error 101 cudaErrorInvalidDevice's twin by
    number only. The name needs no driver; the text is added where a driver can be asked."""
    from cuda.bindings import driver

    from graphtier.service.gpu.runtime import CudaError, check_driver

    assert check_driver((driver.CUresult.CUDA_SUCCESS, 7), "cuX") == 7
    assert check_driver((driver.CUresult.CUDA_SUCCESS, 1, 2), "cuX") == (1, 2)
    assert check_driver((driver.CUresult.CUDA_SUCCESS,), "cuX") is None
    with pytest.raises(CudaError, match=r"^cuCtxGetCurrent: CUDA_ERROR_NOT_INITIALIZED") as info:
        check_driver((driver.CUresult.CUDA_ERROR_NOT_INITIALIZED, None), "cuCtxGetCurrent")
    assert "cuda" + "Error" not in str(info.value)  # no runtime name


def test_a_view_that_is_not_the_memory_asked_for_is_refused():
    """torch's `__cuda_array_interface__` import copies when the pointer's device is not the one asked
    for; `require_view` refuses anything but the very bytes on the very GPU (checked here with a tensor
    that cannot be them: it lives on the CPU)."""
    from graphtier.service.gpu.runtime import CudaError
    from graphtier.service.gpu.views import require_view

    elsewhere = torch.zeros(4)
    with pytest.raises(CudaError, match="not viewable in place on GPU 0: torch made a copy on cpu"):
        require_view(elsewhere, elsewhere.data_ptr(), 0)
    with pytest.raises(CudaError, match="not viewable in place on GPU 1"):
        require_view(elsewhere, elsewhere.data_ptr() + 64, 1)


def test_a_vmm_export_id_already_exported_is_refused_and_the_other_fd_stays():
    """The error path of a VMM allocation whose export id is taken must not withdraw the other
    allocation's fd: the id is checked before any CUDA call, so this runs without a GPU too."""
    import os

    from graphtier.contract.errors import SharedMemoryError
    from graphtier.service.memory import FdExporter, fetch_fds
    from graphtier.service.memory.device_vmm import VmmAllocation

    with tempfile.TemporaryDirectory(prefix="gtvmm-", dir="/tmp") as where, FdExporter(f"{where}/m.sock") as exporter:
        read, write = os.pipe()
        try:
            exporter.add("tier-0", read)
            with pytest.raises(SharedMemoryError, match="'tier-0' for a second tier: it is exported already"):
                VmmAllocation(0, 4096, "a second tier", exporter=exporter, export_id="tier-0")
            assert exporter.exported() == ["tier-0"]
            (fd,) = fetch_fds(exporter.path, ["tier-0"])  # still the pipe: the first owner's fd is open
            os.write(write, b"x")
            assert os.read(fd, 1) == b"x"
            os.close(fd)
        finally:
            os.close(read)
            os.close(write)
