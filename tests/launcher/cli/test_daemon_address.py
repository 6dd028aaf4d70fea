"""The client finds its daemon through `contract.runtime_dir.read_daemon_address`, which reads endpoints.json
without pydantic: it must answer as the file's schema (`contract.endpoints.read_endpoints`) does."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from graphtier.contract.endpoints import ENDPOINTS_FILE, Endpoints, read_endpoints
from graphtier.contract.runtime_dir import DaemonAddress, read_daemon_address

WRITTEN = Endpoints(
    pid=4242,
    started_at=datetime(2026, 11, 25, tzinfo=timezone.utc),
    runtime_dir="/r",
    grpc_unix="/r/daemon.sock",
    http_url="http://127.0.0.1:8080",
    log_file="/r/daemon.log",
    dataset_root="/d",
)


def test_the_address_is_the_endpoints_a_daemon_wrote(tmp_path):
    (tmp_path / ENDPOINTS_FILE).write_text(WRITTEN.model_dump_json(indent=2))
    address, endpoints = read_daemon_address(tmp_path), read_endpoints(tmp_path)
    assert address == DaemonAddress(pid=endpoints.pid, grpc_unix=endpoints.grpc_unix, http_url=endpoints.http_url)
    assert address.grpc_target == endpoints.grpc_target == "unix:/r/daemon.sock"


@pytest.mark.parametrize(
    "text",
    [None, "", "{not json", "[]", '{"pid": "4242", "grpc_unix": "/s", "http_url": "h"}', '{"pid": true}'],
    ids=["missing", "empty", "not JSON", "not a mapping", "pid a string", "pid a bool"],
)
def test_an_unreadable_file_is_no_daemon_yet_for_both_readers(tmp_path, text):
    if text is not None:
        (tmp_path / ENDPOINTS_FILE).write_text(text)
    assert read_daemon_address(tmp_path) is None and read_endpoints(tmp_path) is None
