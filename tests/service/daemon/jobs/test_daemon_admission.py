"""Admission: jobs submitted at once run as the machine allows, in order; the others wait and say why."""

from __future__ import annotations

import re
import threading
import time

import pytest
from typer.testing import CliRunner

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.cli.app import app
from graphtier.launcher.client import DaemonClient
from graphtier.service.daemon.jobs.admission import Admission, Capacity, Demand

GiB = 1 << 30


def test_jobs_start_in_order_when_they_fit_and_say_why_they_wait():
    admission = Admission(Capacity(cores=4, gpus=1, max_running=0, available_memory=lambda: 8 * GiB))
    never = threading.Event()
    assert admission.wait("1", Demand(3, GiB), never)
    said: list[str] = []
    started = threading.Event()

    def second() -> None:
        if admission.wait("2", Demand(2, GiB), never, said.append):
            started.set()

    threading.Thread(target=second, daemon=True).start()
    time.sleep(0.3)
    assert not started.is_set() and said == ["needs 2 cores; running jobs hold 3 of 4"]
    # a small job behind it waits too: no overtaking
    cancelled = threading.Event()
    third_said: list[str] = []
    third = threading.Thread(target=lambda: admission.wait("3", Demand(1, GiB), cancelled, third_said.append))
    third.start()
    time.sleep(0.3)
    assert third_said == ["queued behind job(s) 2"]
    cancelled.set()
    admission.wake()
    third.join(5)
    assert not third.is_alive()
    admission.done("1")
    assert started.wait(5)
    assert admission.running() == ["2"]
    # memory, GPUs and the job limit
    assert Admission(Capacity(8, 1, 0, lambda: GiB))._blocker("x", Demand(1, 2 * GiB)) == ""  # nothing runs: alone
    busy = Admission(Capacity(8, 1, 1, lambda: GiB))
    busy._running["1"] = Demand(1, 0, 1)
    busy._queue.append(("x", Demand(1, 0, 1)))
    assert busy._blocker("x", Demand(1, 0, 1)) == "1 job(s) running, the daemon's limit is 1"
    limited = Admission(Capacity(8, 0, 0, lambda: 64 * GiB, limit_room=lambda: 3 * GiB))  # under a memory limit
    limited._running["1"] = Demand(1, 2 * GiB)
    assert limited._blocker("x", Demand(1, GiB)) == ""
    assert limited._blocker("x", Demand(1, GiB + 1)) == (
        "needs ~1024 MiB under the daemon's memory limit; running jobs hold 2048 MiB of the 3072 MiB it leaves them"
    )


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_a_daemon_with_a_limit_of_one_runs_three_jobs_one_at_a_time(daemon_processes, small_rmat):
    """Under a memory limit too: a job that cannot fit it is refused at submit (`job submit` exits
    non-zero with one line naming the limit, the need and the least that works); the others run."""
    daemon = daemon_processes(small_rmat.directory.parent, "--max-running-jobs", "1", "--memory-limit", "2GiB")
    endpoints = daemon.start()
    spec = dict(dataset="rmat12", fanouts=[5, 5], batch_size=256, hidden=16, epochs=1, nproc_per_node=1)
    run = ["--runtime-dir", str(daemon.runtime_dir)]
    refused = CliRunner().invoke(app, ["job", "submit", "--dataset", "rmat12", "--nproc-per-node", "8", *run])
    assert refused.exit_code != 0
    said = " ".join(refused.output.split())
    least = re.search(
        r"job needs at least (\d+\.\d\d) GiB of memory but the daemon's limit is 2\.00 GiB .* the least that works: "
        r"a memory limit of at least (\d+\.\d\d) GiB or --nproc-per-node (\d)",
        said,
    )
    assert least, said
    assert 2 < float(least[1]) <= float(least[2]) and 1 <= int(least[3]) < 8
    assert CliRunner().invoke(app, ["job", "list", *run]).output.count("rmat12") == 0  # nothing was made
    with DaemonClient(endpoints.grpc_target) as client:
        ids = [client.submit_job(JobSpec(**spec, name=f"q{i}")).job_id for i in range(3)]
        most_active, messages = 0, set()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            jobs = [client.get_job(i) for i in ids]
            active = [j for j in jobs if j.state in (JobState.STARTING, JobState.RUNNING)]
            most_active = max(most_active, len(active))
            messages |= {j.message for j in jobs if j.state == JobState.PENDING}
            if all(j.state.final for j in jobs):
                break
            time.sleep(0.2)
        assert [client.get_job(i).state for i in ids] == [JobState.SUCCEEDED] * 3
    assert most_active == 1
    assert any(m.startswith("queued: ") for m in messages), messages
