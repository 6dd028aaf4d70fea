"""The CLI as a shell uses it: every report on stdout (into a real pipe, into a file), notes and errors on
stderr, and no traceback whatever the terminal's width: COLUMNS=0, 1 and 10, unset with no terminal,
and `job status --watch` in a pseudo-terminal that was given no size (as CI runners and `docker exec -t`
make them)."""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.long  # a daemon, a job and some 30 commands: about a minute on 2 cores, CI's second step

GRAPHTIER = [sys.executable, "-m", "graphtier.launcher.cli"]
JOB = ["--dataset", "rmat12", "--fanout", "5,5", "--batch-size", "256", "--hidden", "16", "--epochs", "1"]


def _env(**columns: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    return {**env, **columns}


def graphtier(*args: object, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*GRAPHTIER, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or _env(),
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def served_job(tmp_path_factory, small_rmat):
    """A daemon (its runtime directory) with one succeeded job (its id)."""
    run = tmp_path_factory.mktemp("pipes") / "run"
    started = graphtier("cluster", "start", "--runtime-dir", run, "--dataset-root", small_rmat.directory.parent)
    assert started.returncode == 0, started.stderr
    try:
        submitted = graphtier("job", "submit", *JOB, "--runtime-dir", run, "--json")
        assert submitted.returncode == 0, submitted.stderr
        job_id = json.loads(submitted.stdout)["job_id"]
        waited = graphtier("job", "status", job_id, "--watch", "--runtime-dir", run)
        assert waited.returncode == 0, waited.stderr
        yield run, job_id
    finally:
        assert graphtier("cluster", "stop", "--runtime-dir", run).returncode == 0
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()


def test_reports_go_to_stdout_through_real_pipes_and_into_files(served_job, tmp_path):
    run, job_id = served_job
    cli = shlex.join(GRAPHTIER)
    grepped = subprocess.run(
        f"{cli} job list --runtime-dir {shlex.quote(str(run))} | grep -w {job_id}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert grepped.returncode == 0 and "succeeded" in grepped.stdout, grepped
    assert grepped.stderr == ""

    report = tmp_path / "status.txt"
    status = subprocess.run(
        f"{cli} job status {job_id} --runtime-dir {shlex.quote(str(run))} > {shlex.quote(str(report))}",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0 and status.stderr == ""
    assert f"job {job_id}" in report.read_text() and "succeeded" in report.read_text()

    # every report command: what it was asked for on stdout, nothing on stderr
    expected = {
        ("metrics",): "hit ratio",
        ("cluster", "status"): "graphtierd pid",
        ("job", "status", job_id, "--watch"): "succeeded",
    }
    for args, text in expected.items():
        done = graphtier(*args, "--runtime-dir", run)
        assert done.returncode == 0, (args, done.stderr)
        assert text in done.stdout and done.stderr == "", (args, done.stdout, done.stderr)
    listed = graphtier("dataset", "list", "--out", run.parent / "no-datasets-here")
    assert listed.returncode == 0 and "datasets in" in listed.stdout and listed.stderr == ""
    doctor = graphtier("doctor")
    assert doctor.returncode == 0 and "/dev/shm" in doctor.stdout and doctor.stderr == ""

    # an error is one line on stderr, and nothing on stdout
    unknown = graphtier("job", "status", "999999", "--runtime-dir", run)
    assert unknown.returncode == 1 and unknown.stdout == "" and unknown.stderr.startswith("error: ")


@pytest.mark.parametrize("columns", ["0", "1", "10", None])
def test_no_traceback_at_any_width(served_job, columns):
    run, job_id = served_job
    env = _env() if columns is None else _env(COLUMNS=columns)
    for args in (
        ("job", "status", job_id),
        ("job", "status", job_id, "--watch"),
        ("job", "list"),
        ("metrics",),
        ("cluster", "status"),
    ):
        done = graphtier(*args, "--runtime-dir", run, env=env)
        assert done.returncode == 0, (columns, args, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and done.stdout.strip(), (columns, args)


def test_watch_in_a_pseudo_terminal_without_a_size(served_job):
    run, job_id = served_job
    controller, terminal = pty.openpty()  # a new pty has 0 rows and 0 columns until someone sets them
    try:
        assert os.get_terminal_size(terminal).columns == 0
        process = subprocess.Popen(
            [*GRAPHTIER, "job", "status", job_id, "--watch", "--runtime-dir", str(run)],
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            env=_env(),
            start_new_session=True,
        )
        os.close(terminal)
        output, deadline = b"", time.monotonic() + 120
        while process.poll() is None or select.select([controller], [], [], 0)[0]:
            assert time.monotonic() < deadline, output[-2000:]
            if select.select([controller], [], [], 0.2)[0]:
                try:
                    output += os.read(controller, 65536)
                except OSError:  # the terminal side closed
                    break
        process.wait(timeout=30)
    finally:
        os.close(controller)
    text = output.decode(errors="replace")
    assert process.returncode == 0 and "Traceback" not in text, text[-2000:]
    assert "succeeded" in text
