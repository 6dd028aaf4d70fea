"""systemd readiness (READY only once serving, a watchdog, STOPPING), a scratch directory that dies
with the daemon (even by kill -9: its reaper removes it), and a socket group."""

from __future__ import annotations

import fcntl
import grp
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import psutil
import pytest
from tmpdir_processes import processes_using

from graphtier.launcher.client.data_plane import DataPlaneClient


def _datagrams(sock: socket.socket, until: str, timeout_s: float = 60.0) -> list[str]:
    """Every datagram received until one contains `until` (or the timeout)."""
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            break
        if until in got[-1]:
            break
    return got


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_ready_is_sent_once_serving_then_watchdog_pings_and_stopping(
    tmp_path, small_rmat, monkeypatch, daemon_processes
):
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()  # returns once endpoints.json names it and health is SERVING
    ready = _datagrams(listener, "READY=1")
    assert ready and ready[-1].startswith("READY=1\n") and endpoints.grpc_target in ready[-1]
    assert f"MAINPID={daemon.pid}" in ready[-1]
    with DataPlaneClient(runtime_dir=daemon.runtime_dir) as client:
        assert client.health() == "SERVING"  # READY meant it
    pings = _datagrams(listener, "WATCHDOG=1", timeout_s=5)
    assert pings and pings[-1] == "WATCHDOG=1"
    assert daemon.terminate() == 0, daemon.log()
    stopping = _datagrams(listener, "STOPPING=1", timeout_s=10)
    assert any(d.startswith("STOPPING=1") for d in stopping)
    listener.close()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_notify_socket_nobody_reads_never_stops_the_daemon(tmp_path, small_rmat, monkeypatch, daemon_processes):
    """A Unix datagram socket queues 10 datagrams (net.unix.max_dgram_qlen) for a reader that lags;
    the watchdog pings (every 0.05 s here) fill it within a second, and the daemon must still answer
    and stop: its notifications never block."""
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)  # never read
    monkeypatch.setenv("NOTIFY_SOCKET", address)
    monkeypatch.setenv("WATCHDOG_USEC", "100000")
    daemon = daemon_processes(small_rmat.directory.parent)
    daemon.start()
    time.sleep(2.0)  # some 40 pings: the queue is full
    with DataPlaneClient(runtime_dir=daemon.runtime_dir) as client:
        assert client.health() == "SERVING"
    assert daemon.terminate(timeout=30) == 0, daemon.log()
    assert "sd_notify 'WATCHDOG=1'" in daemon.log()  # the dropped pings are logged, not waited for
    listener.close()


def _wait(predicate, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.1)
    return predicate()


def test_the_scratch_directory_lives_and_dies_with_the_daemon(tmp_path, small_rmat, daemon_processes):
    first = daemon_processes(small_rmat.directory.parent)
    first.start()
    scratch, run = first.runtime_dir / "tmp", first.runtime_dir
    assert any(p.name.startswith("pymp-") for p in scratch.iterdir())  # multiprocessing's, here not in /tmp
    first.kill9()  # what a crash leaves, its reaper removes: scratch, sockets, endpoints, lock; its forkserver ends
    assert _wait(lambda: not scratch.exists() and not (run / "daemon.lock").exists()), sorted(os.listdir(run))
    assert not processes_using(scratch) and sorted(os.listdir(run)) == ["daemon.log"]
    said = f"graphtierd pid {first.pid} ended without stopping (killed?); its reaper removed {scratch}"
    assert _wait(lambda: said in first.log()), first.log()[-2000:]
    assert "killed 0 process(es) that outlived it" in first.log()  # they ended with their owner, unkilled

    second = daemon_processes(small_rmat.directory.parent)
    second.start()
    reaper = next(
        c for c in psutil.Process(second.pid).children() if c.cmdline() == psutil.Process(second.pid).cmdline()
    )
    reaper.kill()  # the reaper killed with its daemon (a whole process group at once) ...
    second.kill9()
    assert scratch.exists()
    stubborn = _ignoring_sigterm({"TMPDIR": str(scratch)})  # ... and a process of it that ignored its end
    third = daemon_processes(small_rmat.directory.parent)
    try:
        third.start()
        assert stubborn.wait(10) == -signal.SIGKILL  # ... the next daemon kills and removes what they left
    finally:
        _kill(stubborn)
    # the stubborn one, and maybe the dead daemon's forkserver on its way out
    assert re.search(f"removed stale {re.escape(str(scratch))} left by a daemon that died \\(and [1-9]", third.log())
    assert third.terminate() == 0
    assert not scratch.exists() and not processes_using(scratch)  # the forkserver ended before the daemon did
    assert "Traceback" not in third.log(), third.log()[-3000:]


def _ignoring_sigterm(environment: dict[str, str]) -> subprocess.Popen:
    """A process that ignores SIGTERM, with `environment` added to its own; started once it says so."""
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)"
    process = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, **environment}, stdout=subprocess.PIPE)
    assert process.stdout is not None and process.stdout.readline()
    return process


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def test_the_reaper_kills_what_of_its_dead_daemon_still_runs_and_nothing_else(tmp_path, monkeypatch):
    """A process of a dead daemon that ignored the SIGTERM its owner's end brought (or left its agent's
    tree and got none) is killed by the reaper once its wait is over, before the scratch goes; one whose
    scratch names another daemon, or while a daemon holds the lock, is left alone."""
    from graphtier.contract.runtime_dir import LOCK_FILE
    from graphtier.service.daemon import reaper

    monkeypatch.setattr(reaper, "PROCESSES_GONE_S", 1.0)  # the reaper's wait for them to end, shortened
    run, scratch = tmp_path / "run", tmp_path / "run" / "tmp"
    scratch.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (run / LOCK_FILE).touch()
    stubborn = _ignoring_sigterm({"TMPDIR": str(scratch)})
    try:
        (scratch / reaper.SCRATCH_MARK).write_text(str(os.getpid()))  # another daemon's scratch
        reaper._reap(dead.pid, run, scratch, ())
        assert stubborn.poll() is None and scratch.exists()
        (run / LOCK_FILE).touch()  # (it removed the dead daemon's lock file)
        with open(run / LOCK_FILE) as held:  # a daemon started since holds the lock
            fcntl.flock(held, fcntl.LOCK_EX)
            (scratch / reaper.SCRATCH_MARK).write_text(str(dead.pid))
            reaper._reap(dead.pid, run, scratch, ())
            assert stubborn.poll() is None and scratch.exists()
        reaper._reap(dead.pid, run, scratch, ())  # the dead daemon's, nobody holds the lock
        assert stubborn.wait(10) == -signal.SIGKILL
        assert not scratch.exists() and not (run / LOCK_FILE).exists()
    finally:
        _kill(stubborn)


def test_the_scratch_directory_is_removed_after_multiprocessings_own_clean_up(tmp_path):
    # multiprocessing.util imported first (torch's imports may do that), then the scratch directory made
    # and multiprocessing's pymp-* in it: the exit removes both, the pymp-* first, without the
    # FileNotFoundError traceback of a scratch directory removed under multiprocessing's feet
    code = (
        "import logging, multiprocessing.util, sys; from pathlib import Path; "
        "from graphtier.service.daemon.main import private_scratch_dir; "
        "scratch = private_scratch_dir(Path(sys.argv[1]), logging.getLogger()); "
        "assert Path(multiprocessing.util.get_temp_dir()).parent == scratch"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not (tmp_path / "tmp").exists()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_socket_group_opens_the_socket_to_its_members(tmp_path):
    group = grp.getgrgid(os.getgid()).gr_name
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(run),
            "--dataset-root",
            str(tmp_path),
            "--socket-group",
            group,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (run / "endpoints.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stat.S_IMODE(os.stat(run / "daemon.sock").st_mode) == 0o660
        assert stat.S_IMODE(os.stat(run).st_mode) == 0o750
        assert os.stat(run / "daemon.sock").st_gid == os.getgid()
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(tmp_path / "r2"),
            "--socket-group",
            "no-such-group-xyz",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "no Unix group named 'no-such-group-xyz'" in bad.stderr


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_live_socket_is_never_taken_over_and_foreign_directories_keep_their_mode(
    tmp_path, small_rmat, daemon_processes
):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    sock = shared / "g.sock"
    first = daemon_processes(
        small_rmat.directory.parent,
        "--socket",
        str(sock),
        "--log-file",
        str(shared / "d.log"),
        runtime_dir=tmp_path / "run1",
    )
    first.start()
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755  # the daemon's files may live there; not its directory
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(tmp_path / "run2"),
            "--socket",
            str(sock),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 3 and f"the socket {sock} is in use by another running process" in second.stderr
    with DataPlaneClient(runtime_dir=first.runtime_dir) as client:
        assert client.health() == "SERVING"  # still reachable: its socket was left alone
    assert first.terminate() == 0
    assert "Traceback" not in first.log()  # a clean stop is quiet


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_daemon_whose_runtime_dir_is_removed_stops_and_unlinks_its_segments(tmp_path, small_rmat):
    """`rm -rf` of the home under a running daemon (a test's tmp dir, a user's cleanup) used to leave
    it running unreachable forever, holding its datasets in /dev/shm."""
    import shutil

    run = tmp_path / "home" / "run"
    log = tmp_path / "daemon.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "graphtier.service.daemon",
                "--runtime-dir",
                str(run),
                "--dataset-root",
                str(small_rmat.directory.parent),
            ],
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 120
        while not (run / "endpoints.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        with DataPlaneClient(runtime_dir=run) as client:
            layout = client.load_dataset("rmat12").layout
        segment = f"/dev/shm/{layout.handle.colptr.name}"
        assert os.path.exists(segment)
        shutil.rmtree(tmp_path / "home")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not os.path.exists(segment)
    assert "was removed or replaced: nothing can reach or stop this daemon" in log.read_text()
