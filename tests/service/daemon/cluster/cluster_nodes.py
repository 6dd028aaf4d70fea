"""Cluster tests' nodes: several real graphtierd processes on one machine, each a "node"
with its own home, runtime directory, socket, state, dataset root and TCP address on its own
loopback address (127.0.0.1, 127.0.0.2, ...), sharing one TLS certificate and one cluster token."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from graphtier.launcher.client import DaemonClient

NODE_HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4")
PEER_TIMEOUT_S = 6.0


def wait_for(predicate, timeout: float, what: str):
    """The first truthy value of `predicate()`, polled every 0.25 s; the test fails naming `what`
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


FINAL_TIMEOUT_S = 180.0  # a small job on two or three daemons, started to ended


def final_job(client, job_id: str, timeout: float = FINAL_TIMEOUT_S, what: str = ""):
    """Job `job_id` as `client` reports it once it has ended (failing the test after `timeout`)."""
    return wait_for(
        lambda: (lambda j: j if j.state.final else None)(client.get_job(job_id)),
        timeout,
        what or f"job {job_id} to end",
    )


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def make_certificate(directory: Path, hosts: tuple[str, ...] = NODE_HOSTS) -> tuple[Path, Path]:
    """One self-signed certificate naming every node's address: each daemon serves it and trusts it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "graphtier test cluster")])
    now = dt.datetime.now(dt.timezone.utc)
    names = [x509.DNSName("localhost"), *(x509.IPAddress(ipaddress.ip_address(h)) for h in hosts)]
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cluster.crt", directory / "cluster.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@dataclass
class Node:
    """One daemon of the test cluster."""

    index: int
    host: str
    port: int
    home: Path
    process: object  # DaemonProcess

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def runtime_dir(self) -> Path:
        return self.home / "run"

    @property
    def dataset_root(self) -> Path:
        return self.home / "datasets"

    def client(self, **kwargs) -> DaemonClient:
        return DaemonClient(runtime_dir=self.runtime_dir, **kwargs)


class NodeCluster:
    """Makes nodes; `start()` starts every node made so far with the others as peers."""

    def __init__(self, daemon_processes, base: Path) -> None:
        self.daemon_processes, self.base = daemon_processes, base
        self.cert, self.key = make_certificate(base)
        self.token = base / "cluster.token"
        self.token.write_text(secrets.token_hex(32))
        self.token.chmod(0o600)
        self.nodes: list[Node] = []

    def add(
        self,
        datasets: list[Path] = (),
        *,
        token: Path | None = None,
        extra: tuple[str, ...] = (),
        peers: list[str] | None = None,
    ) -> Node:
        index = len(self.nodes)
        host = NODE_HOSTS[index]
        home = self.base / f"n{index}"
        (home / "datasets").mkdir(parents=True)
        for dataset in datasets:
            shutil.copytree(dataset, home / "datasets" / dataset.name)
        node = Node(index, host, free_port(host), home, None)
        node.peers = peers  # type: ignore[attr-defined]  # the harness's own fields
        node.token = token or self.token  # type: ignore[attr-defined]  # the harness's own fields
        node.extra = extra  # type: ignore[attr-defined]  # the harness's own fields
        self.nodes.append(node)
        return node

    def start(self) -> list[Node]:
        for node in self.nodes:
            peers = node.peers if node.peers is not None else [n.address for n in self.nodes if n is not node]
            flags = [
                "--tcp",
                node.address,
                "--token-file",
                str(node.token),
                "--http-host",
                node.host,
                "--peer-timeout",
                str(PEER_TIMEOUT_S),
                "--cuda-probe-timeout",
                "0",
                "--nvml-interval",
                "0",
            ]
            if "--insecure" not in node.extra:
                flags += ["--tls-cert", str(self.cert), "--tls-key", str(self.key)]
            for peer in peers:
                flags += ["--peer", peer]
            node.process = self.daemon_processes(node.dataset_root, *flags, *node.extra, runtime_dir=node.runtime_dir)
        for node in self.nodes:
            node.process.start()
        time.sleep(0.5)  # the forkserver and helpers a daemon starts at once are not jobs' processes
        for node in self.nodes:
            node.baseline = {p.pid for p in psutil.Process(node.process.pid).children(recursive=True)}
        return self.nodes


def start_daemon_processes(
    base: Path, dataset_dir: Path, count: int, *, link_files: bool = False
) -> list[tuple[subprocess.Popen, Path, str]]:
    """`count` daemons as separate processes on NODE_HOSTS (one TLS certificate, one token, each the
    others' peer), each with a copy of `dataset_dir` (hard links with `link_files`: the files are
    read-only), waited for until each serves; (process, runtime dir, HOST:PORT) per node. For the
    benchmarks, which run outside pytest and measure the daemons' processes."""
    from graphtier.contract.endpoints import read_endpoints

    cert, key = make_certificate(base)
    token = base / "cluster.token"
    token.write_text(os.urandom(32).hex())
    token.chmod(0o600)
    addresses = [f"{host}:{free_port(host)}" for host in NODE_HOSTS[:count]]
    nodes = []
    for index, address in enumerate(addresses):
        home = base / f"n{index}"
        shutil.copytree(
            dataset_dir, home / "datasets" / dataset_dir.name, copy_function=os.link if link_files else shutil.copy2
        )
        argv = [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(home / "run"),
            "--dataset-root",
            str(home / "datasets"),
            "--tcp",
            address,
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            "--token-file",
            str(token),
            "--http-host",
            address.split(":")[0],
            "--cuda-probe-timeout",
            "0",
            "--nvml-interval",
            "0",
            *(f"--peer={a}" for a in addresses if a != address),
        ]
        with open(home / "daemon.out", "wb") as out:
            nodes.append((subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT), home / "run", address))
    for popen, run, _ in nodes:
        deadline = time.monotonic() + 120
        while (read_endpoints(run) is None or read_endpoints(run).pid != popen.pid) and time.monotonic() < deadline:
            if popen.poll() is not None:
                raise SystemExit(f"a daemon exited: see {run.parent / 'daemon.out'}")
            time.sleep(0.1)
    return nodes
