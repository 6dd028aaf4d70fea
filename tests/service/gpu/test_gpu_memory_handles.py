"""Device memory handles between real processes: a dedicated allocation shared by CUDA IPC handle or
by VMM fd (passed over the owner's Unix socket), opened by another process as a CUDA view of the
same bytes, and -- for VMM -- alive until the last mapping goes, whoever goes first."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
from gpu_marks import needs_cuda

from graphtier.service.memory import DEVICE_MECHANISM, FdExporter, allocate, copy_host_to_device

pytestmark = needs_cuda

CHILD = """
import json, sys, torch
from graphtier.service.memory import MemoryHandle, Region, open_memory
handle = MemoryHandle.model_validate_json(sys.argv[1])
memory = open_memory(handle, device=0)
view = memory.view(Region(offset=0, shape=(1024,), dtype="float32"))
print(json.dumps({"sum": float(view.sum()), "device": str(view.device)}), flush=True)
if len(sys.argv) > 2:  # wait until the owner has dropped its allocation, then read again
    sys.stdin.readline()
    print(json.dumps({"sum": float(view.sum())}), flush=True)
memory.close()
"""


@pytest.fixture
def exporter():
    with tempfile.TemporaryDirectory(prefix="gtgpu-", dir="/tmp") as where, FdExporter(f"{where}/m.sock") as served:
        yield served


@pytest.mark.parametrize("mode", ["ipc", "vmm"])
def test_device_memory_is_opened_by_another_process_as_the_same_bytes(mode, exporter):
    memory = allocate("gpu-handle-test", 4096, device=0, mode=mode, exporter=exporter)
    try:
        handle = memory.handle
        assert (handle.location, handle.mechanism, handle.nbytes) == ("device", DEVICE_MECHANISM[mode], 4096)
        values = torch.arange(1024, dtype=torch.float32)
        copy_host_to_device(memory, 0, values)
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(CHILD), handle.model_dump_json()],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout.splitlines()[0]) == {"sum": float(values.sum()), "device": "cuda:0"}
    finally:
        memory.close()
    assert exporter.exported() == []


def test_vmm_memory_outlives_its_owners_mapping_while_a_consumer_maps_it(exporter):
    memory = allocate("gpu-vmm-lifetime", 4096, device=0, mode="vmm", exporter=exporter)
    values = torch.arange(1024, dtype=torch.float32)
    copy_host_to_device(memory, 0, values)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CHILD), memory.handle.model_dump_json(), "wait"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = json.loads(child.stdout.readline())
        memory.close()  # the owner unmaps and releases: the consumer's mapping keeps the memory
        torch.cuda.synchronize()
        child.stdin.write("go\n")
        child.stdin.flush()
        second = json.loads(child.stdout.readline())
        assert child.wait(timeout=60) == 0, child.stderr.read()
    finally:
        if child.poll() is None:
            child.kill()
        for stream in (child.stdin, child.stdout, child.stderr):
            stream.close()
    assert first["sum"] == second["sum"] == float(values.sum())
