"""The daemon's runtime directory is 0700 and its socket 0600, whatever the umask or who made the directory."""

from __future__ import annotations

import json
import os
import stat

import pytest
from typer.testing import CliRunner

from graphtier.launcher.cli.app import app


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_runtime_dir_and_socket_are_private_even_under_umask_0(tmp_path, small_rmat):
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    os.chmod(run, 0o777)  # as a careless earlier tool left it
    runner = CliRunner()
    old = os.umask(0)
    try:
        started = runner.invoke(
            app,
            [
                "cluster",
                "start",
                "--runtime-dir",
                str(run),
                "--dataset-root",
                str(small_rmat.directory.parent),
                "--json",
            ],
            catch_exceptions=False,
        )
    finally:
        os.umask(old)
    assert started.exit_code == 0, started.output
    try:
        endpoints = json.loads(started.stdout)
        assert _mode(run) == 0o700
        assert _mode(endpoints["grpc_unix"]) == 0o600
    finally:
        stopped = runner.invoke(app, ["cluster", "stop", "--runtime-dir", str(run)], catch_exceptions=False)
    assert stopped.exit_code == 0, stopped.output
