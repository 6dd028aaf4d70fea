"""DaemonConfig: defaults under GRAPHTIER_HOME, files, flags, and clear errors for bad values."""

from __future__ import annotations

import json

import pytest

from graphtier.contract.errors import DaemonConfigError
from graphtier.service.daemon.config import DaemonConfig


def test_defaults_live_under_graphtier_home(graphtier_home):
    from graphtier.contract.endpoints import default_dataset_root

    config = DaemonConfig()
    assert config.version == 1
    assert config.runtime_dir == graphtier_home / "run"
    assert config.socket == graphtier_home / "run" / "daemon.sock"
    assert config.log_path == graphtier_home / "run" / "daemon.log"
    assert config.dataset_root == default_dataset_root()  # the same root `graphtier dataset prepare` writes
    assert config.tcp_address is None and config.http_port == 0


def test_yaml_file_paths_are_relative_to_it_and_flags_win(tmp_path):
    path = tmp_path / "conf" / "graphtierd.yaml"
    path.parent.mkdir()
    path.write_text("version: 1\nruntime_dir: run\ndataset_root: ../data\ntcp: 127.0.0.1:0\nhttp_port: 8123\n")
    config = DaemonConfig.build(path, http_port=9000, dataset_root=None)
    assert config.runtime_dir == tmp_path / "conf" / "run"
    assert config.dataset_root == tmp_path / "data"
    assert config.tcp_address == ("127.0.0.1", 0)
    assert config.http_port == 9000  # the flag overrides the file; None flags do not


def test_json_file(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"version": 1, "http_host": "0.0.0.0", "grpc_workers": 4}))
    config = DaemonConfig.build(path)
    assert config.http_host == "0.0.0.0" and config.grpc_workers == 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("version: 2\n", "version"),
        ("runtime_dirr: /tmp/x\n", "runtime_dirr"),
        ("tcp: localhost\n", "HOST:PORT"),
        ("http_port: 70000\n", "http_port"),
        ("- a list\n", "must be a mapping"),
        ("a: [unclosed\n", "not valid YAML"),
    ],
)
def test_bad_config_files_name_the_file_and_the_problem(tmp_path, text, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(DaemonConfigError) as info:
        DaemonConfig.build(path)
    assert str(path) in str(info.value) and expected in str(info.value)


def test_missing_file_and_too_long_socket_path(tmp_path):
    with pytest.raises(DaemonConfigError, match="cannot read"):
        DaemonConfig.build(tmp_path / "absent.yaml")
    with pytest.raises(DaemonConfigError, match="at most 107"):
        DaemonConfig.build(runtime_dir=tmp_path / ("x" * 120))
    short = DaemonConfig.build(runtime_dir=tmp_path / ("x" * 120), socket_path="/tmp/gt.sock")
    assert str(short.socket) == "/tmp/gt.sock"
