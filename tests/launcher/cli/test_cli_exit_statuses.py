"""The `graphtier` exit statuses, through real processes: 1 a failure, 2 a usage error or invalid input,
3 a failed job waited for, 141 quietly when the reader of stdout goes away (`| head`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

GRAPHTIER = [sys.executable, "-m", "graphtier.launcher.cli"]


def _run(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GRAPHTIER, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def _with_stdout_closed_early(*args: object) -> tuple[int, str]:
    """Run `graphtier ARGS` with its stdout a pipe whose reader is gone before it writes: (status, stderr)."""
    process = subprocess.Popen([*GRAPHTIER, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdout.close()  # the interpreter takes far longer to start than this
    _, err = process.communicate(timeout=120)
    return process.returncode, err


def test_help_states_the_exit_statuses():
    shown = " ".join(_run("--help").stdout.split())
    assert "Exit status: 0 done; 1 failed" in shown and "2 usage error or invalid input" in shown
    assert "3 the job waited for failed" in shown and "141 output closed early" in shown


def test_a_usage_error_exits_2():
    missing = _run("job", "status")
    assert missing.returncode == 2 and "Missing argument" in missing.stderr
    unknown = _run("dataset", "list", "--no-such-flag")
    assert unknown.returncode == 2 and "No such option" in " ".join(unknown.stderr.split())


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_invalid_input_exits_2_and_a_runtime_failure_1(tmp_path):
    bad_name = _run("dataset", "inspect", "../etc", "--out", tmp_path)
    assert bad_name.returncode == 2 and "invalid dataset name '../etc'" in bad_name.stderr
    no_daemon = _run("job", "list", "--runtime-dir", tmp_path / "run")
    assert no_daemon.returncode == 1 and "no graphtier daemon at" in no_daemon.stderr
    unreadable = tmp_path / "not-a-dir"
    unreadable.write_text("a file where the dataset root should be")
    io_error = _run("dataset", "prepare", "synthetic:rmat", "--name", "g", "--scale", "6", "--out", unreadable / "x")
    assert io_error.returncode == 1 and f"{unreadable}" in io_error.stderr and "Traceback" not in io_error.stderr


def test_a_closed_pipe_is_quiet(tmp_path):
    status, err = _with_stdout_closed_early("dataset", "list", "--json", "--out", tmp_path)
    assert (status, err) == (141, "")
    status, err = _with_stdout_closed_early("--help")
    assert (status, err) == (141, "")


SCRIPT_THAT_FAILS = "raise SystemExit('the training script gave up')\n"


@pytest.fixture
def daemon(tmp_path, small_rmat):
    run = tmp_path / "run"
    started = _run("cluster", "start", "--runtime-dir", run, "--dataset-root", small_rmat.directory.parent)
    assert started.returncode == 0, started.stderr
    try:
        yield run
    finally:
        stopped = _run("cluster", "stop", "--runtime-dir", run)
        assert stopped.returncode == 0, stopped.stderr
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_job_exit_statuses_through_a_daemon(tmp_path, daemon):
    script = tmp_path / "fails.py"
    script.write_text(SCRIPT_THAT_FAILS)
    failed = _run(
        "job", "submit", "--dataset", "rmat12", "--script", script, "--nproc-per-node", "1", "--wait",
        "--runtime-dir", daemon, timeout=300,
    )  # fmt: skip
    assert failed.returncode == 3, failed.stderr
    assert "[failed]" in failed.stdout + failed.stderr
    job_id = _run("job", "list", "--json", "--runtime-dir", daemon).stdout.split('"job_id": "')[1].split('"')[0]
    status = _run("job", "status", job_id, "--runtime-dir", daemon)
    assert status.returncode == 3 and "[failed]" in status.stdout + status.stderr

    unknown = _run("job", "status", "999", "--runtime-dir", daemon)
    assert unknown.returncode == 1 and "no job '999'" in unknown.stderr

    status, err = _with_stdout_closed_early("job", "logs", job_id, "--runtime-dir", daemon)
    assert (status, err) == (141, "")
    piped = subprocess.run(
        f"{' '.join(GRAPHTIER)} job logs {job_id} --runtime-dir {daemon} | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True,
        executable="/bin/bash",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode in (0, 141) and piped.stderr == "" and len(piped.stdout.splitlines()) == 1
    assert Path(daemon).is_dir()
