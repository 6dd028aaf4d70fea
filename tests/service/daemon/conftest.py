"""Fixtures for the daemon's tests: real graphtierd processes and an in-process `Daemon`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

READY_TIMEOUT_S = 120.0


class DaemonProcess:
    """`python -m graphtier.service.daemon` as a user starts it, with its output in a file."""

    def __init__(self, runtime_dir: Path, dataset_root: Path, *extra: str) -> None:
        self.runtime_dir = runtime_dir
        self.dataset_root = dataset_root
        self.extra = extra
        self.output = runtime_dir.parent / f"graphtierd-{len(list(runtime_dir.parent.glob('graphtierd-*')))}.out"
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(self.runtime_dir),
            "--dataset-root",
            str(self.dataset_root),
            *self.extra,
        ]

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def start(self):
        """Start and wait until endpoints.json names this process and health is SERVING."""
        from graphtier.contract.endpoints import read_endpoints
        from graphtier.launcher.client import DaemonClient

        with open(self.output, "wb") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                pytest.fail(f"graphtierd exited with {self.popen.returncode}:\n{self.log()}")
            endpoints = read_endpoints(self.runtime_dir)
            if endpoints is not None and endpoints.pid == self.popen.pid:
                with DaemonClient(endpoints.grpc_target) as client:
                    assert client.health() == "SERVING"  # endpoints.json is written only once serving
                return endpoints
            time.sleep(0.05)
        pytest.fail(f"graphtierd not ready after {READY_TIMEOUT_S} s:\n{self.log()}")

    def log(self) -> str:
        return self.output.read_text(errors="replace") if self.output.exists() else ""

    def terminate(self, timeout: float = 60.0) -> int:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def kill9(self) -> None:
        assert self.popen is not None
        self.popen.kill()
        self.popen.wait(30)


@pytest.fixture
def daemon_processes(tmp_path):
    """`start(dataset_root, *flags) -> DaemonProcess` (not started); every one still running is stopped after."""
    started: list[DaemonProcess] = []

    def make(dataset_root: Path, *extra: str, runtime_dir: Path | None = None) -> DaemonProcess:
        process = DaemonProcess(runtime_dir or tmp_path / "run", dataset_root, *extra)
        started.append(process)
        return process

    yield make
    for process in started:
        if process.popen is not None and process.popen.poll() is None:
            process.popen.send_signal(signal.SIGTERM)
            try:
                process.popen.wait(60)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
    from graphtier.service.shm import reclaim_stale_segments

    reclaim_stale_segments()  # a test that failed after a kill -9 must not fail the next one's leak check


@pytest.fixture
def make_inproc_daemon(tmp_path, small_rmat):
    """`make(**config) -> Daemon`: a started `Daemon` in this process (real gRPC socket and HTTP) serving
    small_rmat's root, with DaemonConfig fields overridden by `config`; stopped after the test."""
    from graphtier.service.daemon.config import DaemonConfig
    from graphtier.service.daemon.server import Daemon

    started = []

    def make(**config):
        daemon = Daemon(
            DaemonConfig(
                runtime_dir=tmp_path / f"run{len(started) or ''}", dataset_root=small_rmat.directory.parent, **config
            )
        )
        started.append(daemon)
        daemon.start()
        return daemon

    try:
        yield make
    finally:
        for daemon in started:
            daemon.stop()


@pytest.fixture
def inproc_daemon(make_inproc_daemon):
    """A `Daemon` running in this process, so a test can add jobs to it."""
    return make_inproc_daemon()


def segments_of(pid: int) -> set[str]:
    """Names of the graphtier segments in /dev/shm owned by process `pid`."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(f"graphtier.{pid}.")}


@pytest.fixture
def shm_of():
    return segments_of
