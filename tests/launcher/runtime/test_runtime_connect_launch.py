"""A user's own launch: `torchrun --nproc-per-node 2 train.py` and `python train.py`, whose script
calls `graphtier.connect(dataset=...)`, register a job with the machine's daemon (a real graphtierd
process) from inside the ranks; the job trains, shows in `job list` like any other and ends with
its ranks -- failed, with the cause, when a rank raises or dies."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.errors import GraphtierError, SamplingError
from graphtier.contract.jobs.state import JobState
from graphtier.contract.processes import JOB_NICENESS
from graphtier.launcher.client import DaemonClient

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
LAUNCH_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def cora_root(shared_datasets, tmp_path_factory) -> Path:
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    root = tmp_path_factory.mktemp("connect-prepared")
    source = f"planetoid:{shared_datasets / 'planetoid_cora'}"
    prepare_dataset(PrepareConfig(source=source, name="cora", undirected=True, root=root))
    return root


@pytest.fixture
def daemon(shared_daemon):
    """The module's daemon; the dataset a test's job loaded is unloaded after it (no segment outlives a test)."""
    yield shared_daemon
    with DaemonClient(runtime_dir=shared_daemon) as client:
        for loaded in client.list_datasets():
            client.unload_dataset(loaded.name, force=True)


@pytest.fixture(scope="module")
def shared_daemon(cora_root, tmp_path_factory):
    """A graphtierd process serving `cora_root`, shared by this module's tests; stopped (SIGTERM) after them."""
    from graphtier.contract.endpoints import read_endpoints

    tmp_path = tmp_path_factory.mktemp("connect-daemon")
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(run)]
    log = open(tmp_path / "graphtierd.out", "wb")
    popen = subprocess.Popen([*argv, "--dataset-root", str(cora_root)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while (found := read_endpoints(run)) is None or found.pid != popen.pid:
        assert popen.poll() is None and time.monotonic() < deadline, (tmp_path / "graphtierd.out").read_text()
        time.sleep(0.05)
    try:
        yield run
    finally:
        popen.send_signal(signal.SIGTERM)
        popen.wait(60)
        log.close()


def _env(run: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHTIER_", "PET_", "TORCHELASTIC_"))}
    env.update(GRAPHTIER_RUNTIME_DIR=str(run), OMP_NUM_THREADS="1")
    env["GRAPHTIER_SHM_NAMESPACE"] = os.environ["GRAPHTIER_SHM_NAMESPACE"]
    return env


def _torchrun(tmp_path: Path, *script: str) -> list[str]:
    # torchrun of this interpreter, as the user types it (--standalone: a free port, not 29500)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "--log-dir", str(tmp_path / "te"), *script]  # fmt: skip


def _job_ids(run: Path) -> set[str]:
    with DaemonClient(runtime_dir=run) as client:
        return {job.job_id for job in client.list_jobs()}


def _final_job(run: Path, before: set[str], timeout_s: float = 30.0):
    """The one job registered since `before` was listed, once it has ended."""
    with DaemonClient(runtime_dir=run) as client:
        deadline = time.monotonic() + timeout_s
        while not (jobs := [j for j in client.list_jobs() if j.job_id not in before]) or not jobs[0].state.final:
            assert time.monotonic() < deadline, f"the job did not end: {jobs}"
            time.sleep(0.2)
    (job,) = jobs
    return job


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_torchrun_of_a_users_script_registers_trains_and_ends_its_job(daemon, tmp_path):
    script, before = EXAMPLES / "sage_blocks.py", _job_ids(daemon)
    done = subprocess.run(
        _torchrun(tmp_path, str(script), "--dataset", "cora", "--epochs", "20"),
        env=_env(daemon),
        capture_output=True,
        text=True,
        timeout=LAUNCH_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job = _final_job(daemon, before)
    assert job.state == JobState.SUCCEEDED, job.message
    assert job.spec.dataset == "cora" and job.spec.nproc_per_node == 2 and job.spec.fanouts == [25, 10]
    assert job.spec.script == str(script) and job.spec.args == ["--dataset", "cora", "--epochs", "20"]
    assert sorted(r.rank for r in job.ranks) == [0, 1]
    assert job.progress.global_step == job.progress.total_steps == 20 * 2  # 140 train ids: 2 batches per rank
    assert job.result is not None and job.result.test_accuracy > 0.7
    listed = subprocess.run(
        [sys.executable, "-m", "graphtier", "job", "list", "--json", "--runtime-dir", str(daemon)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    listed_jobs = {j["job_id"]: j for j in json.loads(listed.stdout)}
    assert listed_jobs[job.job_id]["state"] == "succeeded", listed.stdout + listed.stderr


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_plain_python_is_one_rank_maps_ids_back_and_its_exception_fails_the_job(daemon, tmp_path, shared_datasets):
    script, before = tmp_path / "train.py", _job_ids(daemon)
    script.write_text(
        "import json, os, graphtier\n"
        "job = graphtier.connect(dataset='cora', fanout=[5], batch_size=32, priority='inherit')\n"  # closed at exit
        "print('rank', job.rank, 'of', job.world_size, 'job', job.job_id, 'nice', os.nice(0), flush=True)\n"
        "test = job.source_ids(job.split_ids('test'))\n"  # graphtier's ids are hotness ranks
        "open(os.environ['OUT'] + '/test_ids.json', 'w').write(json.dumps(sorted(test.tolist())))\n"
        "raise ValueError('bad learning rate')\n"
    )
    env = {**_env(daemon), "OUT": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    assert done.returncode == 1 and "rank 0 of 1 job" in done.stdout, done.stdout + done.stderr
    assert done.stdout.split("nice ")[1].split()[0] == str(os.nice(0))  # priority='inherit': the launch's
    assert "ValueError: bad learning rate" in done.stderr
    job = _final_job(daemon, before)
    assert job.state == JobState.FAILED and job.spec.nproc_per_node == 1
    assert job.message == "rank 0: ValueError: bad learning rate"
    index = (shared_datasets / "planetoid_cora" / "ind.cora.test.index").read_text().split()
    assert json.loads((tmp_path / "test_ids.json").read_text()) == sorted(int(i) for i in index)  # the source's


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_rank_killed_mid_job_fails_the_job_instead_of_leaving_it_running(daemon, tmp_path):
    script, before = tmp_path / "train.py", _job_ids(daemon)
    script.write_text(
        "import os, time, graphtier\n"
        "with graphtier.connect(dataset='cora', fanout=[5], batch_size=16, epochs=50) as job:\n"
        "    open(f'{os.environ[\"OUT\"]}/rank{job.rank}.pid', 'w').write(str(os.getpid()))\n"
        "    for epoch in job.epochs():\n"
        "        for batch in job.batches(epoch):\n"
        "            time.sleep(0.2)\n"
    )
    env = {**_env(daemon), "OUT": str(tmp_path)}
    launch = subprocess.Popen(
        _torchrun(tmp_path, str(script)), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        pid_file = tmp_path / "rank1.pid"
        deadline = time.monotonic() + LAUNCH_TIMEOUT_S
        while not pid_file.exists() or not pid_file.read_text():
            assert launch.poll() is None and time.monotonic() < deadline, launch.stdout.read().decode()[-3000:]
            time.sleep(0.1)
        # the ranks report at their first epoch's end (this script counts no steps), which ends on both ranks
        # together (its figures are summed over them): wait for it, not for a fixed time
        deadline = time.monotonic() + 60
        while True:
            with DaemonClient(runtime_dir=daemon) as client:
                (running,) = [j for j in client.list_jobs() if j.job_id not in before]
            # connect() runs the ranks as the daemon runs its own (5 more nice than it, SCHED_BATCH), and their
            # producers at the same priority: a demoted producer beside an undemoted rank is starved by it
            served = [r for r in running.ranks if r.producer_pid and r.trainer_pid]
            if served or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert served, running.ranks
        daemon_niceness = os.getpriority(os.PRIO_PROCESS, read_endpoints(daemon).pid)
        for rank in served:
            for pid in (rank.trainer_pid, rank.producer_pid):
                assert os.getpriority(os.PRIO_PROCESS, pid) == daemon_niceness + JOB_NICENESS, rank
                assert os.sched_getscheduler(pid) == os.SCHED_BATCH, rank
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        assert launch.wait(120) != 0
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
        launch.stdout.close()
    job = _final_job(daemon, before)
    assert job.state == JobState.FAILED
    assert "exited before this node's ranks finished" in job.message, job.message


def test_an_unknown_priority_is_refused_before_anything_is_registered(tmp_path):
    import graphtier

    with pytest.raises(GraphtierError, match=r"priority='low'.*'job' or 'inherit'"):
        graphtier.connect(dataset="cora", runtime_dir=tmp_path, priority="low")


def test_a_bad_fanout_is_refused_in_the_command_lines_words(tmp_path):
    import graphtier

    words = "graphtier.connect(): fanout '15,x': expected comma-separated integers like 15,10,5 (-1 = all neighbours)"
    with pytest.raises(SamplingError, match=re.escape(words)):
        graphtier.connect(dataset="cora", runtime_dir=tmp_path, fanout="15,x")
    with pytest.raises(SamplingError, match=r"connect\(\): fanout: fanout 0 for hop 2 in \[5, 0\] is invalid"):
        graphtier.connect(dataset="cora", runtime_dir=tmp_path, fanout=[5, 0])
