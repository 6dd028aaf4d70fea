"""Users' own scripts as jobs: a real daemon, real producers, real torchrun ranks running the
files in examples/ (and scripts written here) through `graphtier.launcher.loader`."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from graphtier.contract.environment import JOB_ID_ENV, JOB_TOKEN_ENV
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.artifact import read_manifest
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
# no dropout: the built-in model draws its masks its own way (graphtier.nn.Dropout), the script with nn.Dropout, and
# the comparison is of the two models' maths and data paths, not of two random streams
SPEC = dict(
    dataset="rmat12",
    fanouts=[10, 5],
    batch_size=32,
    hidden=64,
    lr=0.01,
    epochs=6,
    nproc_per_node=2,
    seed=3,
    dropout=0.0,
)


def _run(daemon, spec: JobSpec):
    with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
        job = client.submit_job(spec)
        events = list(client.job_events(job.job_id, follow=True, include_logs=True))
        return client.get_job(job.job_id), events


def _epoch_rates(log: str) -> list[float]:
    """Each rank's batches/s of every epoch after the first (warm-up), from the job log."""
    return [float(r) for epoch, r in re.findall(r"\] epoch (\d+) trained: .* ([\d.]+) batches/s", log) if epoch != "0"]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_own_graphsage_script_trains_like_the_builtin_one(inproc_daemon):
    builtin, _ = _run(inproc_daemon, JobSpec(**SPEC))
    custom, events = _run(
        inproc_daemon, JobSpec(**SPEC, script=str(EXAMPLES / "sage_blocks.py"), args=["--eval-every", "3"])
    )
    for job in (builtin, custom):
        assert job.state == JobState.SUCCEEDED, f"{job.message}\n{Path(job.log_path).read_text()[-3000:]}"
    b, c = builtin.result, custom.result
    print(
        f"builtin test {b.test_accuracy:.4f} val {b.val_accuracy:.4f}; script test {c.test_accuracy:.4f} "
        f"val {c.val_accuracy:.4f}"
    )
    assert c.test_accuracy > 0.25  # 8 classes: chance is 0.125
    assert abs(c.test_accuracy - b.test_accuracy) <= 0.03 and abs(c.val_accuracy - b.val_accuracy) <= 0.03

    # Progress and the per-rank view work as for the built-in model (restarts: the test below).
    p = custom.progress
    assert p.global_step == p.total_steps == 6 * p.steps_per_epoch and p.traffic.total_bytes > 0
    assert sorted(r.rank for r in custom.ranks) == [0, 1] and all(r.global_step == p.total_steps for r in custom.ranks)
    states = [e.state_change.current for e in events if e.state_change]
    assert states == [JobState.PENDING, JobState.STARTING, JobState.RUNNING, JobState.SUCCEEDED]
    assert inproc_daemon.tracker.ranks(custom.job_id)[0].trainer.model_bytes > 0
    # The script's loop drives the same session: the same curves, its evaluations in their epochs' records,
    # and its own model exported (named by its class), as the built-in one is (rebuilt by load_model).
    for job in (builtin, custom):
        assert [r.epoch for r in job.history] == list(range(6))
        assert all(r.train_loss is not None and r.train_accuracy is not None for r in job.history)
        assert job.artifact is not None and job.artifact.state == "kept"
    assert [sorted(r.metrics) for r in custom.history] == [[], [], ["test_accuracy", "val_accuracy"], [], []] + [
        ["test_accuracy", "val_accuracy"]
    ]
    assert not read_manifest(Path(custom.artifact.path)).model.builtin
    assert read_manifest(Path(builtin.artifact.path)).model.kind == "sage"
    # torchrun's own files live in the job's directory, not in a /tmp/torchelastic_* left behind.
    assert list((Path(custom.log_path).parent / "torchelastic").glob(f"job-{custom.job_id}_*"))

    # Every line a rank printed -- the runtime's and the script's own -- is whole and attributed.
    logs = [e.log for e in events if e.log and not e.log.from_producer]
    assert any(line.rank == 0 and line.text.startswith("[rank 0] epoch 2: {'val': ") for line in logs)
    assert any(line.rank == 0 and line.text.startswith("[rank 0] final accuracy: ") for line in logs)
    for line in logs:
        assert line.text.count("[rank ") <= 1 and "epoch epoch" not in line.text, line.text
        if line.text.startswith("[rank"):
            assert line.rank is not None

    rates = {
        name: statistics.median(_epoch_rates(Path(job.log_path).read_text()))
        for name, job in (("builtin", builtin), ("script", custom))
    }
    print(f"median rank steps/s: builtin {rates['builtin']:.1f}, script {rates['script']:.1f}")
    assert rates["script"] >= 0.5 * rates["builtin"]  # a loose bound: tests/bench/bench_script_api.py measures


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_script_that_raises_fails_its_job_with_the_exception_line(inproc_daemon, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text(
        "from graphtier.launcher import loader\n"
        "with loader.connect() as job:\n"
        "    for epoch in job.epochs():\n"
        "        for batch in job.batches(epoch):\n"
        "            job.step(0.0)\n"
        "            if job.rank == 1 and job.global_step == 3:\n"
        "                raise ValueError(f'lr {job.spec.lr} is too high at step 3')\n"
    )
    job, events = _run(inproc_daemon, JobSpec(**{**SPEC, "epochs": 2}, script=str(script)))
    assert job.state == JobState.FAILED
    assert job.message == "rank 1: ValueError: lr 0.01 is too high at step 3"
    assert events[-1].state_change.message == job.message
    texts = [e.log.text for e in events if e.log]
    assert f'[rank 1]   File "{script}", line 7, in <module>' in texts  # the traceback starts in the script


def test_a_missing_script_is_refused_at_submit(inproc_daemon, tmp_path):
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        with pytest.raises(DaemonRequestError, match=rf"script {tmp_path}/nope.py: no such file.*INVALID_ARGUMENT"):
            client.submit_job(JobSpec(**SPEC, script=str(tmp_path / "nope.py")))
        with pytest.raises(DaemonRequestError, match=rf"script {tmp_path}: not a file"):
            client.submit_job(JobSpec(**SPEC, script=str(tmp_path)))
        assert client.list_jobs() == []


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_pyg_example_trains_through_the_loader(inproc_daemon):
    pytest.importorskip("torch_geometric", reason="the PyG example needs torch_geometric (the test extra has it)")
    job, _ = _run(inproc_daemon, JobSpec(**SPEC, script=str(EXAMPLES / "pyg_sage.py")))
    assert job.state == JobState.SUCCEEDED, f"{job.message}\n{Path(job.log_path).read_text()[-3000:]}"
    assert job.result.test_accuracy > 0.25 and job.progress.global_step == job.progress.total_steps


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_killed_rank_of_a_script_job_is_restarted_and_resumes(inproc_daemon):
    spec = JobSpec(
        **{**SPEC, "batch_size": 16, "epochs": 10},  # 130 steps: rank 1 still trains when it is killed
        checkpoint_every_steps=5,
        max_restarts=1,
        script=str(EXAMPLES / "sage_blocks.py"),
    )
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        job = client.submit_job(spec)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running = client.get_job(job.job_id)
            assert not running.state.final, running.message
            if running.progress and running.progress.global_step >= 12 and all(r.trainer_pid for r in running.ranks):
                break
            time.sleep(0.2)
        assert running.progress.global_step < running.progress.total_steps - 20, "the job ran past where it is killed"
        os.kill(next(r.trainer_pid for r in running.ranks if r.rank == 1), signal.SIGKILL)
        for _ in client.job_events(job.job_id, follow=True):
            pass
        final = client.get_job(job.job_id)
    log = Path(final.log_path).read_text()
    assert final.state == JobState.SUCCEEDED, f"{final.message}\n{log[-3000:]}"
    assert final.restarts == 1 and final.progress.global_step == final.progress.total_steps
    resumed = re.findall(r"\[rank (\d)\] resumed from ckpt-(\d+)\.pt: epoch (\d+), (\d+) batches into it", log)
    assert (
        sorted(r[0] for r in resumed) == ["0", "1"] and int(resumed[0][1]) >= 10
    )  # both ranks, from a late checkpoint
    assert final.result.test_accuracy > 0.2
    # the epochs before the restart keep their records (in the checkpoints): a whole history, each epoch once
    assert [r.epoch for r in final.history] == list(range(10))
    with open(Path(final.log_path).parent / "history.csv") as f:
        assert [line.split(",")[0] for line in f.read().splitlines()[1:]] == [str(e) for e in range(10)]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_cancelled_job_leaves_no_rank_that_ignored_sigterm_or_was_stopped(inproc_daemon, tmp_path, monkeypatch):
    """torchrun starts each rank in a session of its own: the daemon's signals to the agent's group do not
    reach them. A rank that ignores SIGTERM, and one stopped with SIGSTOP, both before they ever opened a
    channel (so the daemon has no pid of theirs), still end with their job."""
    from graphtier.service.daemon.jobs import runner

    monkeypatch.setattr(runner, "STOP_GRACE_S", 3.0)  # the wait for the agent before SIGKILL, shortened
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open(os.path.join({str(tmp_path)!r}, 'rank%s.pid' % os.environ['RANK']), 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    pid_files = [tmp_path / "rank0.pid", tmp_path / "rank1.pid"]
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        job = client.submit_job(JobSpec(**SPEC, script=str(script)))
        deadline = time.monotonic() + 120
        while not all(p.exists() and p.read_text() for p in pid_files) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(p.exists() for p in pid_files), f"the ranks never started: {client.get_job(job.job_id).message}"
        ranks = [psutil.Process(int(p.read_text())) for p in pid_files]  # bound to them: a reused pid is not theirs
        ranks[1].suspend()
        cancelled = client.cancel_job(job.job_id, "test says stop")
    assert cancelled.state == JobState.CANCELLED
    alive = _running(ranks)
    for process in alive:  # nothing of the test stays behind when it fails
        process.kill()
    assert not alive, f"ranks {[p.pid for p in alive]} outlived their cancelled job"


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_process_that_left_the_ranks_tree_ends_with_its_job(inproc_daemon, tmp_path):
    """A rank's child that double-forks out of torchrun's tree (reparented to init, in a session of its own) and
    ignores SIGTERM is reached by no signal to the agent or its ranks; it still ends when its job does, and the
    job log says so. A process with the job's id but not its token is not the job's: it is left alone."""
    script = tmp_path / "daemonises.py"
    pid_file, go = tmp_path / "left.pid", tmp_path / "go"
    script.write_text(
        "import os, signal, time\n"
        "if os.environ['RANK'] == '0' and os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"        open({str(pid_file)!r} + '.part', 'w').write(str(os.getpid()))\n"
        f"        os.rename({str(pid_file)!r} + '.part', {str(pid_file)!r})\n"
        "        time.sleep(600)\n"
        "    os._exit(0)\n"
        f"while not (os.path.exists({str(pid_file)!r}) and os.path.exists({str(go)!r})):\n"
        "    time.sleep(0.05)\n"
    )
    decoy = None
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        job_id = client.submit_job(JobSpec(**SPEC, script=str(script))).job_id
        marks = {JOB_ID_ENV: job_id, JOB_TOKEN_ENV: "not-this-jobs-token"}
        decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env={**os.environ, **marks})
        try:
            deadline = time.monotonic() + 120
            while not pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert pid_file.exists(), f"the script never started its process: {client.get_job(job_id).message}"
            left = psutil.Process(int(pid_file.read_text()))  # bound to it: a pid reused later is not it
            go.touch()
            list(client.job_events(job_id, follow=True))
            final = client.get_job(job_id)
            alive = _running([left])
            for process in alive:  # nothing of the test stays behind when it fails
                process.kill()
            assert not alive, f"pid {left.pid}, outside torchrun's tree, outlived its {final.state.name} job"
            assert decoy.poll() is None, "a process that only shares the job's id was ended with it"
        finally:
            decoy.kill()
            decoy.wait()
    assert final.state == JobState.SUCCEEDED, final.message
    log = Path(final.log_path).read_text()
    assert f"ended 1 process(es) this job left running after its ranks (pid {left.pid}:" in log, log[-2000:]
    assert "1 of them ignored SIGTERM and were killed" in log


def _running(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running: not ended, not a zombie nobody reaped yet, not a pid reused since."""
    return [p for p in processes if p.is_running() and _status(p) != psutil.STATUS_ZOMBIE]


def _status(process: psutil.Process) -> str:
    try:
        return process.status()
    except psutil.NoSuchProcess:
        return psutil.STATUS_DEAD
