"""Peers in the daemon config, on the command line and in a hosts file: validated up front, one line
naming the value; a multi-node spec validated at the door."""

from __future__ import annotations

import subprocess
import sys

import pytest

from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.daemon.cluster.settings import ClusterConfig
from graphtier.service.daemon.config import DaemonConfig


def test_peers_from_flags_file_and_config_merge_in_order_without_this_node(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("# the cluster\n10.0.0.1:7070\n10.0.0.2:7070  # this node\n\n10.0.0.3:7070\n")
    config_file = tmp_path / "graphtierd.yaml"
    config_file.write_text("version: 1\ntcp: 10.0.0.2:7070\ncluster:\n  peers_file: hosts\n  peer_timeout_s: 5\n")
    config = DaemonConfig.build(config_file, cluster={"peers": ["10.0.0.9:7070"], "node_name": "b"})
    assert config.cluster.peers_file == hosts and config.cluster.node_name == "b" and config.cluster.peer_timeout_s == 5
    assert config.cluster.peer_addresses(own="10.0.0.2:7070") == ["10.0.0.9:7070", "10.0.0.1:7070", "10.0.0.3:7070"]
    assert ClusterConfig().enabled is False


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tcp", "127.0.0.1:7070", "--peer", "nowhere"], "peer 'nowhere' must be HOST:PORT"),
        (
            ["--tcp", "127.0.0.1:7070", "--peer", "10.0.0.1:0"],
            "peer '10.0.0.1:0' must be HOST:PORT with a port in 1..65535",
        ),
        (["--peer", "10.0.0.1:7070"], "cluster peers are reached over TCP"),
        (["--tcp", "0.0.0.0:7070", "--peer", "10.0.0.1:7070"], "is no address peers can reach: give cluster.advertise"),
        (
            ["--tcp", "127.0.0.1:7070", "--peers-file", "/nonexistent/hosts"],
            "peers_file '/nonexistent/hosts': cannot read",
        ),
        (["--tcp", "127.0.0.1:7070", "--peer", "10.0.0.1:7070", "--peer-timeout", "0"], "peer_timeout_s"),
    ],
)
def test_bad_peers_are_one_line_naming_the_value_and_exit_2(tmp_path, flags, message):
    result = subprocess.run(
        [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(tmp_path / "r"), *flags],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_hosts_file_line_that_is_no_address_is_named(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("10.0.0.1:7070\n10.0.0.2\n")
    with pytest.raises(ValueError, match=rf"{hosts}:2: peer '10.0.0.2' must be HOST:PORT"):
        ClusterConfig(peers_file=hosts)


def test_multi_node_specs_are_checked_at_the_door():
    spec = JobSpec(dataset="d", nodes=["a", "b", "c"])
    assert spec.nnodes == 3 and spec.world_size == 3 and spec.multi_node
    assert JobSpec(dataset="d", nnodes=2, nproc_per_node=2).world_size == 4
    for values, message in (
        ({"nodes": ["a"]}, "at least 2 nodes"),
        ({"nodes": ["a", "a"]}, "names a node twice"),
        ({"nodes": ["a", "b"], "nnodes": 3}, "nnodes=3 but nodes names 2"),
        ({"nnodes": 0}, "nnodes"),
    ):
        with pytest.raises(InvalidRequestError, match=message):
            JobSpec.build({"dataset": "d", **values})


def test_job_submit_names_a_bad_nodes_value_and_exits_2(tmp_path):
    from typer.testing import CliRunner

    from graphtier.launcher.cli.app import app

    result = CliRunner().invoke(
        app, ["job", "submit", "--dataset", "d", "--nodes", "a,,b", "--runtime-dir", str(tmp_path / "run")]
    )
    assert result.exit_code == 2 and "--nodes 'a,,b'" in result.output
