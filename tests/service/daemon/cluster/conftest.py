"""Fixtures for cluster tests: `test_cluster` makes real daemons as "nodes" (see cluster_nodes.py)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest
from cluster_nodes import NodeCluster  # tests/service/daemon/cluster is on sys.path (rootdir conftest mode)


@pytest.fixture
def test_cluster(daemon_processes, monkeypatch):
    base = Path(tempfile.mkdtemp(prefix="gtc-", dir="/tmp"))  # short: Unix socket paths are limited
    monkeypatch.setenv("GRAPHTIER_HOME", str(base / "client-home"))
    cluster = NodeCluster(daemon_processes, base)
    try:
        yield cluster
    finally:
        for node in cluster.nodes:  # before their files go (daemon_processes would stop them after this)
            popen = getattr(node.process, "popen", None)
            if popen is not None and popen.poll() is None:
                popen.send_signal(signal.SIGTERM)
                try:
                    popen.wait(60)
                except subprocess.TimeoutExpired:
                    popen.kill()
                    popen.wait()
        shutil.rmtree(base, ignore_errors=True)
