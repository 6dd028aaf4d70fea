"""One daemon per state directory: a second daemon given a running one's state directory is refused
naming the holder, and sibling runtime directories get state directories of their own by default."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from graphtier.launcher.client import DaemonClient

EXIT_RUNNING = 3  # graphtierd's status when another daemon holds what it needs


def _graphtierd(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphtier.service.daemon", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _state_dir(runtime_dir: Path) -> Path:
    printed = _graphtierd("--runtime-dir", runtime_dir, "--print-files")
    assert printed.returncode == 0, printed.stderr
    return Path(json.loads(printed.stdout)["state_dir"])


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_sibling_runtime_dirs_get_their_own_state(tmp_path, daemon_processes, small_rmat):
    assert _state_dir(tmp_path / "run") == tmp_path / "state"  # $GRAPHTIER_HOME/run keeps $GRAPHTIER_HOME/state
    assert _state_dir(tmp_path / "r1") == tmp_path / "state-r1"
    assert _state_dir(tmp_path / "r2") == tmp_path / "state-r2"
    first = daemon_processes(small_rmat.directory.parent, runtime_dir=tmp_path / "r1")
    second = daemon_processes(small_rmat.directory.parent, runtime_dir=tmp_path / "r2")
    first.start()
    second.start()  # both run: neither holds the other's state
    with DaemonClient(runtime_dir=tmp_path / "r1") as client:
        client.list_jobs()
    assert (tmp_path / "state-r1" / "jobs.sqlite3").exists() and (tmp_path / "state-r2" / "jobs.sqlite3").exists()
    assert not (tmp_path / "state").exists()
    assert first.terminate() == 0 and second.terminate() == 0


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_a_second_daemon_on_a_running_ones_state_dir_is_refused(tmp_path, daemon_processes, small_rmat):
    state = tmp_path / "shared-state"
    first = daemon_processes(small_rmat.directory.parent, "--state-dir", str(state), runtime_dir=tmp_path / "a")
    first.start()
    refused = _graphtierd(
        "--runtime-dir", tmp_path / "b", "--dataset-root", small_rmat.directory.parent, "--state-dir", state
    )
    assert refused.returncode == EXIT_RUNNING
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert f"the state directory {state} is in use by another graphtier daemon (pid {first.pid}" in lines[0]
    assert f"runtime directory {tmp_path / 'a'}" in lines[0] and "--state-dir" in lines[0]
    assert not (tmp_path / "b" / "endpoints.json").exists() and not (tmp_path / "b" / "daemon.lock").exists()
    assert first.terminate() == 0, first.log()

    after = daemon_processes(small_rmat.directory.parent, "--state-dir", str(state), runtime_dir=tmp_path / "b")
    after.start()  # the lock went with the first daemon
    assert after.terminate() == 0, after.log()
