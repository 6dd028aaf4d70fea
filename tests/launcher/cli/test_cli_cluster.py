"""`graphtier cluster start|status|stop` and `graphtier metrics`, with and without a daemon."""

from __future__ import annotations

import json
import socket

import pytest
from typer.testing import CliRunner

from graphtier.contract.endpoints import running_daemon_pid
from graphtier.launcher.cli.app import app


@pytest.fixture
def cli():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (("cluster", "status"), "start one with `graphtier cluster start`"),
        (("cluster", "stop"), "nothing to stop"),
        (("metrics",), "start one with `graphtier cluster start`"),
        (("metrics", "--json"), "start one with `graphtier cluster start`"),
    ],
)
def test_commands_without_a_daemon_say_so_and_fail(cli, tmp_path, command, expected):
    result = cli(*command, "--runtime-dir", tmp_path / "run")
    assert result.exit_code != 0
    assert f"no graphtier daemon at {tmp_path / 'run'}" in result.output and expected in result.output
    assert result.stdout == ""  # nothing half-printed for a --json reader


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_start_status_metrics_stop(cli, tmp_path, small_rmat):
    run = tmp_path / "run"
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    failed = cli("cluster", "start", "--runtime-dir", run, "--http-port", port, "--json")
    busy.close()
    assert failed.exit_code != 0
    assert "graphtierd exited with status 1 before it was ready" in failed.output
    assert f"cannot listen for HTTP on 127.0.0.1:{port}" in failed.output  # the log's tail
    assert running_daemon_pid(run) is None

    started = cli("cluster", "start", "--runtime-dir", run, "--dataset-root", small_rmat.directory.parent, "--json")
    assert started.exit_code == 0, started.output
    endpoints = json.loads(started.stdout)
    try:
        assert running_daemon_pid(run) == endpoints["pid"]
        assert endpoints["grpc_unix"] == str(run / "daemon.sock") and endpoints["http_url"].startswith("http://")

        again = cli("cluster", "start", "--runtime-dir", run)
        assert again.exit_code != 0 and f"already running for {run} (pid {endpoints['pid']}" in again.output

        status = json.loads(cli("cluster", "status", "--runtime-dir", run, "--json").stdout)
        assert status["pid"] == endpoints["pid"] and status["health"] == "SERVING"
        assert status["endpoints"]["http_url"] == endpoints["http_url"] and status["datasets"] == []
        human = cli("cluster", "status", "--runtime-dir", run)
        assert human.exit_code == 0 and endpoints["http_url"] in human.output and "SERVING" in human.output

        snapshot = json.loads(cli("metrics", "--runtime-dir", run, "--json").stdout)
        assert snapshot["pid"] == endpoints["pid"] and snapshot["traffic"]["hit_ratio"] == 0.0
        table = cli("metrics", "--runtime-dir", run)
        assert table.exit_code == 0 and "feature traffic by tier" in table.output and "pcie" in table.output
    finally:
        stopped = cli("cluster", "stop", "--runtime-dir", run, "--json")
    assert stopped.exit_code == 0, stopped.output
    assert json.loads(stopped.stdout) == {"pid": endpoints["pid"], "stopped": True, "killed": False}
    assert running_daemon_pid(run) is None
    assert sorted(p.name for p in run.iterdir()) == ["daemon.log"]
