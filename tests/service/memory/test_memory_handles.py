"""Memory handles of host location: the wire form, allocate/open/close across real processes, fds
passed over a real Unix socket (the read-write fd of a sealed segment included), no leaks, and
reclaim after the owner is killed. Device handles share this code above the CUDA calls; their
tests are in tests/service/gpu/test_gpu_memory_handles.py."""

from __future__ import annotations

import fcntl
import gc
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.memory import FdExporter, MemoryHandle, Region, allocate, fetch_fds, open_memory
from graphtier.service.memory.wire import handle_from_proto, handle_to_proto, region_from_proto, region_to_proto
from graphtier.service.shm import SegmentOwner, reclaim_stale_segments
from graphtier.service.shm.naming import segment_path

IPC = "ab" * 64
BUS = "0000:18:00.0"


def _run(script: str, *args: str, timeout: float = 120) -> dict:
    """Run `script` in a fresh interpreter (it prints one JSON line); its result."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


@pytest.fixture
def socket_dir():
    path = Path(tempfile.mkdtemp(prefix="gtmem-", dir="/tmp"))  # short: AF_UNIX paths are <= 107 bytes
    yield path
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()


# The wire form


@pytest.mark.parametrize(
    "fields",
    [
        {"location": "host", "mechanism": "shm", "shm_name": "graphtier.1.2.ab.x"},
        {"location": "device", "mechanism": "cuda_ipc", "ipc_handle": IPC, "pci_bus_id": BUS},
        {
            "location": "device",
            "mechanism": "vmm_fd",
            "export_socket": "/run/m.sock",
            "export_id": "t",
            "pci_bus_id": BUS,
        },
    ],
)
def test_each_mechanism_round_trips_the_wire(fields):
    handle = MemoryHandle(nbytes=4096, owner_pid=42, **fields)
    assert handle_from_proto(handle_to_proto(handle)) == handle
    assert MemoryHandle.model_validate_json(handle.model_dump_json()) == handle


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"location": "host", "mechanism": "cuda_ipc", "ipc_handle": IPC, "pci_bus_id": BUS}, "host memory cannot"),
        ({"location": "device", "mechanism": "shm", "shm_name": "graphtier.1.2.ab.x"}, "device memory cannot"),
        ({"location": "host", "mechanism": "shm"}, "a shm handle needs shm_name"),
        ({"location": "device", "mechanism": "cuda_ipc", "ipc_handle": IPC}, "needs pci_bus_id"),
        ({"location": "host", "mechanism": "shm", "shm_name": "../../etc/passwd"}, "not a graphtier segment name"),
        ({"location": "device", "mechanism": "cuda_ipc", "ipc_handle": "XY" * 64, "pci_bus_id": BUS}, "hex digits"),
        (
            {"location": "host", "mechanism": "shm", "shm_name": "graphtier.1.2.ab.x", "pci_bus_id": BUS},
            "a shm handle carries no pci_bus_id",
        ),
    ],
)
def test_an_inconsistent_handle_is_refused_saying_what_is_wrong(fields, message):
    with pytest.raises(ValidationError, match=message):
        MemoryHandle(nbytes=64, owner_pid=1, **fields)


def test_a_region_checks_its_dtype_alignment_and_shape():
    region = Region(offset=16, shape=(3, 4), dtype="float32")
    assert region.nbytes == 48 and region.end == 64
    assert region_from_proto(region_to_proto(region)) == region
    for bad, message in (
        ({"offset": 2, "shape": (1,), "dtype": "int64"}, "not a multiple"),
        ({"offset": 0, "shape": (-1,), "dtype": "int64"}, "negative"),
        ({"offset": 0, "shape": (1,), "dtype": "complex64"}, "not one of"),
    ):
        with pytest.raises(ValidationError, match=message):
            Region(**bad)


# Host memory across processes


def test_host_memory_views_check_their_bounds_and_close_unlinks_the_segment():
    with SegmentOwner() as owner:
        memory = allocate("handles-host", 256, owner=owner)
        handle = memory.handle
        assert (handle.location, handle.mechanism, handle.nbytes) == ("host", "shm", 256)
        assert handle.owner_pid == os.getpid() and memory.device == torch.device("cpu")
        region = Region(offset=64, shape=(4,), dtype="int64")
        memory.view(region).copy_(torch.tensor([3, 1, 4, 1]))
        here = open_memory(handle)  # read-only
        assert here.view(region).tolist() == [3, 1, 4, 1]
        with pytest.raises(SharedMemoryError, match="needs bytes"):
            here.view(Region(offset=248, shape=(2,), dtype="int64"))
        here.close()
        with pytest.raises(SharedMemoryError, match="this mapping of it is closed"):  # not a TypeError of None
            here.view(region)
        memory.close()
        assert not os.path.exists(segment_path(handle.shm_name))
        with pytest.raises(SharedMemoryError, match="does not exist"):
            open_memory(handle)
        memory.close()  # idempotent


def test_allocating_host_memory_without_an_owner_is_refused():
    with pytest.raises(SharedMemoryError, match="needs the SegmentOwner"):
        allocate("orphan", 64)


def _allocate_and_wait(conn) -> None:  # a forked child: owns one segment, then waits to be killed
    owner = SegmentOwner()
    memory = allocate("handles-crash", 4096, owner=owner)
    conn.send(memory.handle.model_dump_json())
    conn.recv()


def test_host_memory_of_a_killed_owner_is_reclaimed_and_then_refused_clearly():
    here, there = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_allocate_and_wait, args=(there,), daemon=True)
    child.start()
    try:
        handle = MemoryHandle.model_validate_json(here.recv())
        assert handle.owner_pid == child.pid and os.path.exists(segment_path(handle.shm_name))
        os.kill(child.pid, signal.SIGKILL)  # no handler runs: the segment stays behind
        child.join(timeout=30)
        assert os.path.exists(segment_path(handle.shm_name))
        assert handle.shm_name in reclaim_stale_segments()
        with pytest.raises(SharedMemoryError, match="its owner has gone"):
            open_memory(handle)
    finally:
        if child.is_alive():
            child.kill()
            child.join(timeout=30)
        here.close()


# File descriptors over a Unix socket

CHILD_FETCHES = """
import json, mmap, os, sys
from graphtier.service.memory import MemoryHandle, Region, fetch_fds, open_memory
sock, handle = sys.argv[1], MemoryHandle.model_validate_json(sys.argv[2])
name = handle.shm_name
values = open_memory(handle).view(Region(offset=16, shape=(2,), dtype="int64")).tolist()  # by name, read-only
try:
    os.close(os.open("/dev/shm/" + name, os.O_RDWR))
    reopened = True
except PermissionError:
    reopened = False
(fd,) = fetch_fds(sock, [name])
mapping = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
os.close(fd)
mapping[8:13] = b"hello"
print(json.dumps({"values": values, "reopened": reopened, "size": len(mapping)}))
"""


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_another_process_opens_host_memory_and_writes_through_a_passed_read_write_fd(socket_dir):
    """A fresh process (it inherits no fd) opens the handle by name without a copy, and writes into
    the sealed segment through the read-write fd passed to it, where reopening the file would fail."""
    fds_before = _open_fds()
    with SegmentOwner() as owner, FdExporter(str(socket_dir / "memory.sock")) as exporter:
        memory = allocate("handles-sealed", 64, owner=owner)
        memory.view(Region(offset=16, shape=(2,), dtype="int64")).copy_(torch.tensor([27, 18]))
        fd = memory.open_read_write_fd()  # before sealing, as the store does
        try:
            exporter.add(memory.handle.shm_name, fd)
        finally:
            os.close(fd)
        memory.segment.seal()  # 0400 and PROT_READ from now on
        assert os.stat(exporter.path).st_mode & 0o777 == 0o600
        got = _run(CHILD_FETCHES, exporter.path, memory.handle.model_dump_json())
        assert got["values"] == [27, 18] and got["size"] == 64
        assert got["reopened"] is (os.geteuid() == 0)  # only root may reopen the sealed file for writing
        seen = open_memory(memory.handle).view(Region(offset=8, shape=(5,), dtype="uint8"))
        assert bytes(seen.tolist()) == b"hello"  # the child wrote through the passed fd
        assert exporter.exported() == [memory.handle.shm_name]
        del seen, memory  # their mappings hold fds of their own (mmap keeps a duplicate)
    gc.collect()
    assert not os.path.exists(exporter.path)
    assert _open_fds() <= fds_before  # the exporter's duplicates are closed


def test_fetching_an_unknown_id_or_from_a_gone_exporter_says_why(socket_dir):
    path = str(socket_dir / "memory.sock")
    fds_before = _open_fds()
    with FdExporter(path) as exporter:
        read, write = os.pipe()
        exporter.add("known", read)
        os.close(read)
        with pytest.raises(SharedMemoryError, match="'unknown' is not exported here"):
            fetch_fds(path, ["known", "unknown"])
        (fd,) = fetch_fds(path, ["known"])  # in this process too: a new fd of the same pipe
        os.write(write, b"x")
        assert os.read(fd, 1) == b"x"
        os.close(fd)
        os.close(write)
        with pytest.raises(SharedMemoryError, match="exported already"):
            exporter.add("known", 0)
        exporter.remove("known")
        exporter.remove("known")  # idempotent
        assert exporter.exported() == []
    with pytest.raises(SharedMemoryError, match="has their owner exited"):
        fetch_fds(path, ["known"])
    assert _open_fds() <= fds_before


def test_a_stale_socket_of_a_dead_exporter_is_replaced(socket_dir):
    path = socket_dir / "memory.sock"
    import socket as sockets

    stale = sockets.socket(sockets.AF_UNIX, sockets.SOCK_SEQPACKET)
    stale.bind(str(path))
    stale.close()  # the file stays, nobody listens
    with FdExporter(str(path)) as exporter:
        assert exporter.exported() == [] and path.exists()


def test_the_store_exports_its_segments_read_write_fds_and_withdraws_them_on_close(small_rmat, socket_dir):
    from graphtier.service.placement import PlacementPlan, TierBudgets
    from graphtier.service.store import SharedDatasetStore

    n, row_bytes = small_rmat.manifest.num_nodes, small_rmat.manifest.feature_row_bytes
    budgets = TierBudgets(
        device_replicated_bytes=0,
        device_interleaved_bytes=0,
        num_devices=0,
        host_bytes=n * row_bytes // 2,
        structure_device_bytes=0,
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes)
    with FdExporter(str(socket_dir / "memory.sock")) as exporter:
        with SharedDatasetStore(small_rmat, plan, fd_exporter=exporter) as store:
            handle = store.handle
            assert handle.fd_socket == exporter.path
            names = {handle.colptr.name, handle.row.name, handle.resident_features.name}
            assert names <= set(exporter.exported())
            assert all(os.stat(segment_path(name)).st_mode & 0o777 == 0o400 for name in names)  # sealed
            (fd,) = fetch_fds(exporter.path, [handle.resident_features.name])
            assert os.fstat(fd).st_size >= handle.resident_features.nbytes
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
            os.close(fd)
        assert exporter.exported() == []


def test_a_store_given_gpus_and_no_exporter_serves_read_write_fds_itself_until_closed(small_rmat):
    """The stores that tests and tools make in process (no daemon, so no daemon fd socket) still let a
    GPU without read-only host registration fall back to a writable registration of their segments.
    (No device tier here: the plan puts none on the GPU, so this runs on the CPU.)"""
    from graphtier.service.placement import PlacementPlan, TierBudgets
    from graphtier.service.store import SharedDatasetStore

    n, row_bytes = small_rmat.manifest.num_nodes, small_rmat.manifest.feature_row_bytes
    budgets = TierBudgets(
        device_replicated_bytes=0,
        device_interleaved_bytes=0,
        num_devices=0,
        host_bytes=n * row_bytes // 2,
        structure_device_bytes=0,
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes)
    with SharedDatasetStore(small_rmat, plan) as plain:
        assert plain.handle.fd_socket is None  # no GPUs: nobody is handed a writable fd
    with SharedDatasetStore(small_rmat, plan, devices=[0]) as store:
        socket_path = store.handle.fd_socket
        assert socket_path is not None and os.stat(socket_path).st_mode & 0o777 == 0o600
        (fd,) = fetch_fds(socket_path, [store.handle.resident_features.name])
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDWR
        os.close(fd)
    assert not os.path.exists(socket_path) and not os.path.exists(os.path.dirname(socket_path))
