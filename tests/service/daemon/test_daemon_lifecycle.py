"""graphtierd as a process: ready, single instance, zero-copy attach of its dataset from
another process, recovery after kill -9 (also mid-job), and SIGTERM cleaning every segment and file.

One story per test because every daemon start costs seconds (torch, grpc, fastapi).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import grpc
import psutil
import pytest
import torch
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.endpoints import ENDPOINTS_FILE, LOCK_FILE, running_daemon_pid
from graphtier.contract.errors import DaemonNotRunningError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.store import attach_dataset

BUDGETS = BudgetSpec(num_devices=2, device_replicated="10%", device_interleaved="20%", host="30%")


def _reflected_services(target: str) -> set[str]:
    with grpc.insecure_channel(target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=10))
    return {service.name for service in reply.list_services_response.service}


def _check_ready(daemon, endpoints) -> None:
    run = daemon.runtime_dir
    assert endpoints.pid == daemon.pid and running_daemon_pid(run) == daemon.pid
    assert json.loads((run / ENDPOINTS_FILE).read_text())["grpc_unix"] == str(run / "daemon.sock")
    assert (run / "daemon.sock").is_socket()
    assert _reflected_services(endpoints.grpc_target) >= {
        "graphtier.v1.DatasetService",
        "graphtier.v1.ProgressService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
    }
    with urllib.request.urlopen(endpoints.http_url + "/healthz", timeout=10) as response:
        assert json.loads(response.read()) == {"status": "serving", "pid": daemon.pid}
    with DataPlaneClient(runtime_dir=run) as client:
        client.wait_until_serving(timeout_s=5)
        assert client.health("graphtier.v1.DatasetService") == "SERVING"


def _check_second_start_refused(daemon, endpoints) -> None:
    began = time.monotonic()
    second = subprocess.run(daemon.argv, capture_output=True, text=True, timeout=60)
    assert second.returncode == 3, second.stderr
    assert f"already running for {daemon.runtime_dir}" in second.stderr and f"pid {daemon.pid}" in second.stderr
    assert endpoints.http_url in second.stderr and endpoints.grpc_target in second.stderr
    assert time.monotonic() - began < 20  # refused before the heavy imports
    with DataPlaneClient(runtime_dir=daemon.runtime_dir) as client:
        assert client.health() == "SERVING"  # the refused start left the running daemon alone


def _check_attached_bytes(layout, prepared) -> None:
    """The daemon's copy, mapped in this process, holds exactly the prepared dataset."""
    attached = attach_dataset(layout.handle)
    plan = layout.handle.plan
    assert torch.equal(attached.graph.colptr, prepared.array("colptr"))
    assert torch.equal(attached.graph.row, prepared.array("row"))
    assert torch.equal(attached.labels, prepared.labels)
    for split in ("train", "val", "test"):
        assert torch.equal(attached.splits[split], prepared.split(split))
    assert 0 < plan.replicated_end < plan.interleaved_end < plan.host_end < plan.num_nodes
    assert torch.equal(attached.resident, prepared.features[: plan.host_end])
    assert torch.equal(attached.storage, prepared.features[plan.host_end :])
    ids = torch.tensor([0, plan.replicated_end, plan.interleaved_end, plan.host_end, plan.num_nodes - 1])
    out = torch.empty(len(ids), prepared.features.shape[1])
    traffic = attached.gather(ids, out)
    assert torch.equal(out, prepared.features[ids])
    assert (traffic.replicated.rows, traffic.host.rows, traffic.storage.rows) == (1, 1, 2)
    assert traffic.interleaved_local.rows + traffic.interleaved_peer.rows == 1
    sizes = {t.tier: t for t in layout.tier_sizes}
    assert sum(sizes[t].rows for t in ("device_replicated", "device_interleaved", "host", "storage")) == plan.num_nodes
    assert sizes["host"].bytes == (plan.host_end - plan.interleaved_end) * plan.row_bytes


def test_ready_refuse_attach_kill9_recover_sigterm(daemon_processes, small_rmat, shm_of):
    first = daemon_processes(small_rmat.directory.parent)
    endpoints = first.start()
    run = first.runtime_dir
    _check_ready(first, endpoints)
    _check_second_start_refused(first, endpoints)
    with DataPlaneClient(runtime_dir=run) as client:
        result = client.load_dataset("rmat12", BUDGETS)
        assert not result.already_loaded and result.layout.owner_pid == first.pid
        assert client.dataset_layout("rmat12") == result.layout
    _check_attached_bytes(result.layout, small_rmat)
    assert len(shm_of(first.pid)) == 8  # colptr, row, labels, three splits, resident features, row checksums

    first.kill9()
    assert {LOCK_FILE, ENDPOINTS_FILE, "daemon.sock"} <= {p.name for p in run.iterdir()}  # as a crash leaves them
    assert len(shm_of(first.pid)) == 8
    with pytest.raises(DaemonNotRunningError, match=f"no graphtier daemon at {run}; start one with"):
        DataPlaneClient(runtime_dir=run)  # a stale endpoints.json is not mistaken for a daemon

    second = daemon_processes(small_rmat.directory.parent)
    endpoints = second.start()
    _check_ready(second, endpoints)
    # The new daemon reclaims the dead one's segments (any new segment owner on the machine would too).
    assert not shm_of(first.pid)
    assert f"removed stale {run / 'daemon.sock'}" in second.log()
    with DataPlaneClient(runtime_dir=run) as client:
        assert client.load_dataset("rmat12", BUDGETS).layout.owner_pid == second.pid
    assert len(shm_of(second.pid)) == 8

    assert second.terminate() == 0, second.log()
    assert not shm_of(second.pid), "SIGTERM unlinks every segment"
    assert sorted(p.name for p in run.iterdir()) == ["daemon.log"]  # socket, lock and endpoints are gone
    assert "unloaded rmat12" in second.log() and "stopped" in second.log()
    with pytest.raises(DaemonNotRunningError, match=f"no graphtier daemon at {run}"):
        DataPlaneClient(runtime_dir=run)


def _running_pids(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def _wait_for_reaper(daemon, timeout_s: float = 60.0) -> str:
    """The killed daemon's log once its reaper has said what it did (or after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while "its reaper removed" not in daemon.log() and time.monotonic() < deadline:
        time.sleep(0.2)
    return daemon.log()


def test_kill9_of_the_daemon_mid_job_takes_its_processes_down(daemon_processes, small_rmat, shm_of):
    """No job process runs on unsupervised: producers and torchrun die with the daemon, ranks with them."""
    first = daemon_processes(small_rmat.directory.parent)
    first.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=16, hidden=16, epochs=500, nproc_per_node=2)
    with DataPlaneClient(runtime_dir=first.runtime_dir) as client:
        job_id = client.submit_job(spec).job_id
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            job = client.get_job(job_id)
            assert not job.state.final, job.message
            if job.state == JobState.RUNNING and len(job.ranks) == 2 and all(r.trainer_pid for r in job.ranks):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the job did not start running")
    producers = [r.producer_pid for r in job.ranks]
    tree = [child.pid for child in psutil.Process(first.pid).children(recursive=True)]
    assert set(producers) | {r.trainer_pid for r in job.ranks} <= set(tree)

    first.kill9()
    deadline = time.monotonic() + 60
    while _running_pids(tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running_pids(tree), [" ".join(psutil.Process(p).cmdline()) for p in _running_pids(tree)]
    assert not [name for pid in producers for name in shm_of(pid)]  # SIGTERMed producers unlinked their slots
    assert "killed 0 process(es) that outlived it" in _wait_for_reaper(first)  # they ended on their own

    second = daemon_processes(small_rmat.directory.parent)
    second.start()
    assert not shm_of(first.pid)  # the dead daemon's tiers are reclaimed
    assert second.terminate() == 0, second.log()


def test_invalid_flags_are_refused_before_anything_is_created(tmp_path):
    bad = subprocess.run(
        [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(tmp_path / "r"), "--tcp", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "tcp 'nowhere' must be HOST:PORT" in bad.stderr
    assert not (tmp_path / "r").exists()
