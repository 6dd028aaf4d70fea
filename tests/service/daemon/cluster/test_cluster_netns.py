"""Two nodes in their own network namespaces joined by a veth pair, so each has its own address
and the link between them can be cut (root only): a cut link mid-job ends the job on both nodes
within the peer timeout, naming the node, and leaves nothing running (slow)."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from cluster_nodes import PEER_TIMEOUT_S, make_certificate

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient

pytestmark = pytest.mark.slow
ADDRESSES = ("10.77.0.1", "10.77.0.2")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = secrets.token_hex(3)
    names, links = [f"gt{tag}n{i}" for i in range(2)], [f"gt{tag}v{i}" for i in range(2)]
    try:
        for name in names:
            _ip("netns", "add", name)
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("link", "add", links[0], "netns", names[0], "type", "veth", "peer", "name", links[1], "netns", names[1])
        for name, link, address in zip(names, links, ADDRESSES, strict=True):
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", name, "link", "set", link, "up")
    except (subprocess.CalledProcessError, OSError) as exc:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"cannot make network namespaces here: {getattr(exc, 'stderr', exc)!r}")
    yield names, links
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _descendants(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def test_a_cut_link_ends_the_job_on_both_nodes_naming_the_node(namespaces, small_rmat):
    names, links = namespaces
    base = Path(tempfile.mkdtemp(prefix="gtn-", dir="/tmp"))
    cert, key = make_certificate(base, ADDRESSES)
    token = base / "cluster.token"
    token.write_text(secrets.token_hex(32))
    token.chmod(0o600)
    port = 7070
    daemons: list[subprocess.Popen] = []
    try:
        for index, (name, link, address) in enumerate(zip(names, links, ADDRESSES, strict=True)):
            home = base / f"n{index}"
            shutil.copytree(small_rmat.directory, home / "datasets" / small_rmat.directory.name)
            peer = ADDRESSES[1 - index]
            argv = [
                "ip",
                "netns",
                "exec",
                name,
                sys.executable,
                "-m",
                "graphtier.service.daemon",
                "--runtime-dir",
                str(home / "run"),
                "--dataset-root",
                str(home / "datasets"),
                "--tcp",
                f"{address}:{port}",
                "--http-host",
                "127.0.0.1",
                "--tls-cert",
                str(cert),
                "--tls-key",
                str(key),
                "--token-file",
                str(token),
                "--peer",
                f"{peer}:{port}",
                "--peer-timeout",
                str(PEER_TIMEOUT_S),
                "--cuda-probe-timeout",
                "0",
                "--nvml-interval",
                "0",
            ]
            env = {**os.environ, "GLOO_SOCKET_IFNAME": link}  # the ranks' gloo traffic crosses the veth link
            with open(base / f"daemon{index}.out", "wb") as out:
                daemons.append(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT))
        clients = []
        for index in range(len(daemons)):
            client = DaemonClient(f"unix:{base / f'n{index}' / 'run' / 'daemon.sock'}")  # Unix sockets cross netns
            client.wait_until_serving(120)
            clients.append(client)
        baseline = [_descendants(p.pid) for p in daemons]
        view = clients[0].cluster_view()
        assert [n.health for n in view.nodes] == ["SERVING", "SERVING"], view
        spec = JobSpec(
            dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=500, nproc_per_node=1, nnodes=2
        )
        job = clients[0].submit_job(spec)
        deadline = time.monotonic() + 180
        while not ((j := clients[0].get_job(job.job_id)).progress and j.progress.global_step > 3):
            assert not j.state.final and time.monotonic() < deadline, (j.state, j.message)
            time.sleep(0.3)
        part_id = j.nodes[1].job_id
        _ip("-n", names[1], "link", "set", links[1], "down")  # the cable is pulled
        cut = time.monotonic()
        finals = []
        for client, job_id in ((clients[0], job.job_id), (clients[1], part_id)):
            while not (final := client.get_job(job_id)).state.final:
                assert time.monotonic() - cut < PEER_TIMEOUT_S + 60, f"job {job_id} still {final.state.value}"
                time.sleep(0.3)
            finals.append(final)
        took = time.monotonic() - cut
        print(
            f"link cut: both parts ended within {took:.1f} s (peer timeout {PEER_TIMEOUT_S:g} s): "
            f"{finals[0].message} | {finals[1].message}"
        )
        assert finals[0].state == JobState.FAILED and f"{ADDRESSES[1]}:{port}" in finals[0].message, finals[0].message
        assert finals[1].state == JobState.FAILED and f"{ADDRESSES[0]}:{port}" in finals[1].message, finals[1].message
        assert took < PEER_TIMEOUT_S + 15, f"the job took {took:.0f} s to end after its link was cut"
        for popen, before in zip(daemons, baseline, strict=True):
            deadline = time.monotonic() + 30
            while _descendants(popen.pid) - before and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not _descendants(popen.pid) - before
        for client in clients:
            client.close()
    finally:
        for popen in daemons:
            popen.send_signal(signal.SIGTERM)
        for popen in daemons:
            try:
                popen.wait(60)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
        shutil.rmtree(base, ignore_errors=True)
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()  # a daemon killed after a failure must not fail the leak check of the next test
