"""How a CUDA job's producers share its GPUs: MPS used, MPS managed by the daemon, or a capped
grid; decided at submit (bad combinations refused in one line), and the managed control daemon
started while jobs need it and never left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.jobs.spec import DEFAULT_PRODUCER_SM_SHARE, JobSpec
from graphtier.service.daemon.jobs.mps import (
    MPS_CONTROL,
    PERCENTAGE_ENV,
    PIPE_ENV,
    MpsControl,
    control_reachable,
)

FAKE = Path(__file__).with_name("fake_mps_control.py")


def _spec(**fields) -> JobSpec:
    return JobSpec.build({"dataset": "d", **fields})


@pytest.fixture
def no_mps_tools(monkeypatch, tmp_path):
    """A PATH without nvidia-cuda-mps-control and a pipe directory no control daemon uses."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    return str(tmp_path / "no-control")


def test_a_cpu_job_uses_no_gpu_and_its_auto_is_recorded_off():
    spec = _spec()
    assert (spec.mps, spec.producer_sm_share) == ("off", DEFAULT_PRODUCER_SM_SHARE)
    share = MpsControl(Path("/nonexistent")).decide(spec)
    assert not share.cuda and share.producer_env() == share.rank_env() == {} and share.grid_share is None
    assert share.describe() == "producers use no GPU: a CPU job"


def test_auto_caps_the_grid_without_a_control_daemon_and_uses_one_that_answers(tmp_path, no_mps_tools):
    spec = _spec(device="cuda", producer_sm_share=12.5)
    off = MpsControl(tmp_path / "run", pipe_directory=no_mps_tools).decide(spec)
    assert (off.mode, off.grid_share, off.producer_env()) == ("off", 0.125, {})
    assert off.describe() == (
        f"producers capped by grid to ~12.5% of the SMs: no MPS control daemon at {no_mps_tools}/control (mps auto)"
    )
    pipe = tmp_path / "mps-pipe"
    pipe.mkdir()
    os.mkfifo(pipe / "control")  # what a running control daemon leaves there
    assert control_reachable(pipe)
    used = MpsControl(tmp_path / "run", pipe_directory=str(pipe)).decide(spec)
    assert (used.mode, used.grid_share) == ("use", None)
    assert used.producer_env() == {PIPE_ENV: str(pipe), PERCENTAGE_ENV: "12.5"}
    assert used.rank_env() == {PIPE_ENV: str(pipe)} and off.rank_env() == {}  # ranks join the server, unlimited
    assert used.describe().startswith("producers under MPS (use) at 12.5% of the SMs: a control daemon answers at")


def test_modes_this_machine_cannot_give_are_refused_in_one_line(tmp_path, no_mps_tools):
    mps = MpsControl(tmp_path / "run", pipe_directory=no_mps_tools)
    with pytest.raises(InvalidRequestError, match=r"mps 'use' needs a running MPS control daemon, but none is at"):
        mps.decide(_spec(device="cuda", mps="use"))
    with pytest.raises(InvalidRequestError, match=rf"mps 'manage' needs {MPS_CONTROL} on the daemon's PATH"):
        mps.decide(_spec(device="cuda", mps="manage"))
    assert mps.decide(_spec(device="cuda", mps="off")).describe().endswith("mps off was asked for")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"producer_sm_share": 0}, "producer_sm_share: Input should be greater than 0"),
        ({"producer_sm_share": 100.5}, "producer_sm_share: Input should be less than or equal to 100"),
        ({"mps": "manage"}, "mps 'manage' shares the ranks' GPUs with their producers: it needs device cuda, not cpu"),
        ({"mps": "always"}, "mps: Input should be 'auto', 'off', 'use' or 'manage'"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(fields, message):
    with pytest.raises(InvalidRequestError, match=message):
        _spec(**fields)


@pytest.fixture
def fake_mps_control(tmp_path, monkeypatch):
    """`nvidia-cuda-mps-control` on PATH as the stand-in of fake_mps_control.py (the real one needs
    NVIDIA's driver); every control daemon it started is gone after the test."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / MPS_CONTROL
    script.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    started: list[int] = []
    yield started
    for pid in started:  # a failed test must not leave its control daemon running
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _control_pid(mps: MpsControl) -> int:
    return int((mps.pipe_directory / "nvidia-cuda-mps-control.pid").read_text())


def test_a_managed_control_daemon_runs_while_jobs_need_it_in_the_daemons_own_directories(tmp_path, fake_mps_control):
    """The lifecycle with the stand-in control (fake_mps_control.py): started once for two jobs, with
    pipe and log directories under the runtime directory, stopped when the last job ends."""
    runtime = tmp_path / "run"
    mps = MpsControl(runtime, pipe_directory=str(tmp_path / "shared-mps"))
    share = mps.decide(_spec(device="cuda", mps="manage", producer_sm_share=20))
    assert share.producer_env() == {PIPE_ENV: str(runtime / "mps" / "pipe"), PERCENTAGE_ENV: "20"}
    assert share.rank_env() == {PIPE_ENV: str(runtime / "mps" / "pipe")}
    mps.acquire("1", share)
    pid = _control_pid(mps)
    fake_mps_control.append(pid)
    mps.acquire("2", share)
    assert _control_pid(mps) == pid, "one control daemon for both jobs"
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert f"{PIPE_ENV}={runtime / 'mps' / 'pipe'}".encode() in environ
    assert "started" in (runtime / "mps" / "log" / "control.log").read_text()
    mps.release("1")
    assert mps.running and _alive(pid)
    mps.release("2")
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid) and not mps.running and not (runtime / "mps").exists()


HOLDER = """
import sys, time
from pathlib import Path
from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.daemon.jobs.mps import MpsControl
mps = MpsControl(Path(sys.argv[1]))
mps.acquire("7", mps.decide(JobSpec(dataset="d", device="cuda", mps="manage")))
print((Path(sys.argv[1]) / "mps" / "pipe" / "nvidia-cuda-mps-control.pid").read_text().strip(), flush=True)
time.sleep(600)
"""


def test_a_control_daemon_left_by_a_killed_daemon_is_stopped_at_the_next_start(tmp_path, fake_mps_control):
    """kill -9 of the process that started the stand-in control daemon leaves it running; the next
    daemon on the same runtime directory stops it (`recover`) before taking jobs."""
    runtime = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), str(runtime)], stdout=subprocess.PIPE, text=True
    )
    try:
        pid = int(holder.stdout.readline())
        fake_mps_control.append(pid)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert _alive(pid) and control_reachable(runtime / "mps" / "pipe"), "the control daemon outlives its starter"
    MpsControl(runtime).recover()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid) and not (runtime / "mps").exists()
