"""Segment names, process liveness (pid reuse, zombies) and reclaiming segments of dead owners."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.shm import reclaim_stale_segments
from graphtier.service.shm.naming import SegmentName, owner_is_alive, process_start_time, validate_label


def _touch(name: str) -> str:
    with open(os.path.join("/dev/shm", name), "wb") as f:
        f.write(b"x")
    return name


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_name_round_trip_and_rejects() -> None:
    name = SegmentName(pid=12, start_time=345, token="abcd0123", label="feat_rows-1")
    assert str(name) == "graphtier.12.345.abcd0123.feat_rows-1"
    assert SegmentName.parse(str(name)) == name
    for bad in ("graphtier.12.345.abcd.", "graphtier.x.345.abcd.l", "graphtier.1.2.3.a/b", "other.1.2.3.l"):
        assert SegmentName.parse(bad) is None
    assert validate_label("ok-label_2") == "ok-label_2"
    with pytest.raises(SharedMemoryError, match="'a b' is invalid"):
        validate_label("a b")


def test_start_time_matches_the_kernel_clock() -> None:
    ticks = process_start_time(os.getpid())
    assert ticks is not None
    started = psutil.boot_time() + ticks / os.sysconf("SC_CLK_TCK")
    assert abs(started - psutil.Process().create_time()) < 0.05
    assert process_start_time(_dead_pid()) is None


def test_zombie_counts_as_dead() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert process_start_time(pid) is None
    finally:
        os.waitpid(pid, 0)


def test_reclaim_removes_dead_and_reused_pids_only() -> None:
    me, my_start = os.getpid(), process_start_time(os.getpid())
    live = _touch(str(SegmentName(me, my_start, "0a", "live")))
    reused = _touch(str(SegmentName(me, my_start + 1, "0b", "reused")))  # same pid, another process
    dead = _touch(str(SegmentName(_dead_pid(), 1, "0c", "dead")))
    foreign = _touch("graphtier.not-a-segment")
    try:
        assert owner_is_alive(SegmentName.parse(live))
        reclaimed = reclaim_stale_segments()
        assert {reused, dead} <= set(reclaimed)
        assert live not in reclaimed and foreign not in reclaimed
        assert os.path.exists(f"/dev/shm/{live}") and os.path.exists(f"/dev/shm/{foreign}")
        assert not os.path.exists(f"/dev/shm/{reused}") and not os.path.exists(f"/dev/shm/{dead}")
    finally:
        for name in (live, reused, dead, foreign):
            if os.path.exists(f"/dev/shm/{name}"):
                os.unlink(f"/dev/shm/{name}")
