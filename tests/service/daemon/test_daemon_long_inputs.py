"""A caller's megabytes are neither written to the daemon's log nor echoed back in full."""

from __future__ import annotations

import pytest

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.messages import shorten
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.daemon.rpc.grpc_status import MESSAGE_LIMIT


def test_shorten_keeps_head_and_tail_and_says_how_much_was_cut():
    text = "a" * 1000 + "TAIL"
    short = shorten(text, 100)
    assert len(short) < 140 and short.startswith("a" * 66) and short.endswith("aTAIL")
    assert f"[{1004 - 66 - 25} characters cut]" in short
    assert shorten("short", 100) == "short"


def test_refused_calls_with_huge_strings_do_not_grow_the_log(daemon_processes, tmp_path, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()
    log_path = daemon.runtime_dir / "daemon.log"
    size_before = log_path.stat().st_size
    huge = "x" * 3_000_000
    with DataPlaneClient(endpoints.grpc_target) as client:
        for _ in range(4):
            with pytest.raises(DaemonRequestError) as info:
                client.load_dataset(huge)
            assert info.value.code == "INVALID_ARGUMENT"
            assert len(str(info.value)) < MESSAGE_LIMIT + 200 and "characters cut" in str(info.value)
    grown = log_path.stat().st_size - size_before
    assert 0 < grown < 16_000  # each refusal is logged, shortened
