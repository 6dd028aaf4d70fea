"""What one user of a shared daemon does, as that user: `UID GID GROUP attach RUNTIME_DIR SECRET` registers
a job as a torchrun launch would and prints it; `UID GID GROUP probe RUNTIME_DIR JOB TOKEN SECRET OWN_JOB`
tries everything that is the owner's on job JOB, which is another user's (knowing even its token and its
launch's secret), and prints each call's outcome as JSON.

test_daemon_tenants.py starts it as root; it loads every module it uses, then becomes UID (groups GID and
GROUP, no capabilities left) before its first call. Loading first is what lets it run where the packages
lie in a directory only root reads (a Python under /root, as on CI); every call, socket and file it opens
is the user's.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import grpc

from graphtier.contract.environment import JOB_TOKEN_ENV
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.identity import SESSION_HEADER
from graphtier.contract.jobs.progress import ProgressReport, TrainerFigures
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.v1 import jobs_pb2

SPEC = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=1, nproc_per_node=1)
LAUNCH_ID = "single@host/pid4242"  # what anyone reads in `ps`: the same for both users


def outcome(call) -> str:
    try:
        call()
    except DaemonRequestError as exc:
        return f"{exc.code}: {exc.message}"
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return "OK"


def attach(runtime_dir: Path, secret: str) -> None:
    with DataPlaneClient(runtime_dir=runtime_dir) as client:
        job, token = client.attach_job(SPEC, LAUNCH_ID, 0, 0, secret)
        print(json.dumps({"job_id": job.job_id, "token": token, "owner": str(job.owner)}))


def probe(runtime_dir: Path, job_id: str, token: str, secret: str, own_job: str) -> None:
    os.environ[JOB_TOKEN_ENV] = token  # the job's token, as if it had leaked
    found: dict[str, str] = {}
    with DataPlaneClient(runtime_dir=runtime_dir) as client:
        found["attach with the launch's secret"] = outcome(lambda: client.attach_job(SPEC, LAUNCH_ID, 0, 0, secret))
        found["cancel"] = outcome(lambda: client.cancel_job(job_id, "not mine"))
        found["logs"] = outcome(lambda: list(client.job_events(job_id, include_logs=True)))
        report = ProgressReport(job_id=job_id, rank=0, pid=os.getpid(), time=_now(), figures=TrainerFigures())
        found["progress"] = outcome(lambda: client.report_progress(report))
        found["open channel"] = outcome(lambda: client.open_channel(job_id, 0, os.getpid()))
        found["release channel"] = outcome(lambda: client.release_channel(job_id, 0))
        found["job's dataset copy"] = outcome(lambda: client.dataset_layout(SPEC.dataset, job_id=job_id))
        found["export"] = outcome(lambda: client.export_job(job_id, Path(tempfile.mkdtemp()) / "model"))
        found["force unload"] = outcome(lambda: client.unload_dataset(SPEC.dataset, force=True))
        found["script job"] = outcome(lambda: client.submit_job(SPEC.model_copy(update={"script": __file__})))
        found["inference of its model"] = outcome(
            lambda: client.submit_job(SPEC.model_copy(update={"from_job": job_id}))
        )
        unreadable = SPEC.model_copy(update={"from_job": own_job, "ids": "/etc/shadow"})
        found["ids the daemon would read"] = outcome(lambda: client.submit_job(unreadable))
        found["status"] = outcome(lambda: client.get_job(job_id))
        found["owner shown"] = str(client.get_job(job_id).owner)
        found["list"] = outcome(lambda: client.list_jobs())
        found["session user"] = client._session.user if client._session is not None else ""
        target = client.target
    cancel = jobs_pb2.CancelJobRequest(job_id=job_id)
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(
            "/graphtier.v1.JobService/CancelJob",
            request_serializer=jobs_pb2.CancelJobRequest.SerializeToString,
            response_deserializer=jobs_pb2.Job.FromString,
        )
        found["cancel without a credential"] = outcome(lambda: call(cancel, timeout=30))
        forged = f"v1.0.{int(time.time()) + 600}.{'0' * 64}"  # root's uid, signed by nobody
        found["cancel with a forged credential"] = outcome(
            lambda: call(cancel, timeout=30, metadata=((SESSION_HEADER, forged),))
        )
    try:
        (runtime_dir / "jobs" / job_id / "job.log").read_bytes()
        found["job log file"] = "OK"
    except OSError as exc:
        found["job log file"] = type(exc).__name__
    print(json.dumps(found))


def _now() -> datetime:
    return datetime.now(timezone.utc)


def load_everything() -> None:
    """Every module of the packages the calls use, loaded now: grpc, protobuf and pydantic load parts of
    themselves on first use, which the user could not read later."""
    for package in (
        "grpc",
        "google.protobuf",
        "pydantic",
        "graphtier.contract",
        "graphtier.launcher.client",
        "graphtier.v1",
    ):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, f"{package}.", onerror=lambda name: None):
            with contextlib.suppress(Exception):  # optional parts (pydantic.v1's, protobuf's C++) may not load
                importlib.import_module(module.name)


def become(uid: int, gid: int, group: int) -> None:
    """This process turns into user `uid` for good: its groups, then its ids (which clears root's
    capabilities), and the proof that root cannot be taken back."""
    os.environ.update(HOME="/nonexistent", PYTHONDONTWRITEBYTECODE="1")
    os.environ.pop("XDG_RUNTIME_DIR", None)
    os.setgroups([group])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise SystemExit("tenant_calls: became root again after dropping it")


if __name__ == "__main__":
    load_everything()
    become(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    command, runtime = sys.argv[4], Path(sys.argv[5])
    if command == "attach":
        attach(runtime, sys.argv[6])
    else:
        probe(runtime, *sys.argv[6:10])
