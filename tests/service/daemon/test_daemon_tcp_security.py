"""gRPC over TCP: TLS and the daemon's token, or a refusal that says why; plaintext only with --insecure."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from graphtier.contract.errors import DaemonError, DaemonRequestError
from graphtier.launcher.client import DaemonClient


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _status(endpoints) -> dict:
    with urllib.request.urlopen(f"{endpoints.http_url}/v1/status", timeout=10) as reply:
        return json.load(reply)


def test_tcp_needs_tls_and_the_token(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent, "--tcp", "127.0.0.1:0")
    endpoints = daemon.start()
    cert, token_file = Path(endpoints.tcp_tls_cert), Path(endpoints.token_file)
    assert _mode(token_file) == 0o600 and _mode(cert.with_name("server.key")) == 0o600
    token = token_file.read_text().strip()
    target = endpoints.grpc_tcp
    with DaemonClient(target, token=token, tls_cert=cert) as client:
        assert client.health() == "SERVING"
        assert "rmat12" in [d.name for d in client.list_datasets(include_prepared=True)]
    with DaemonClient(target, tls_cert=cert) as client:
        with pytest.raises(DaemonRequestError) as info:
            client.list_datasets()
        assert info.value.code == "UNAUTHENTICATED" and "no token was presented" in str(info.value)
    with DaemonClient(target, token="0" * 64, tls_cert=cert) as client:
        with pytest.raises(DaemonRequestError) as info:
            client.health()
        assert info.value.code == "UNAUTHENTICATED" and "not this daemon's" in str(info.value)
    with DaemonClient(target, token=token, timeout_s=5) as client:  # plaintext to the TLS port
        with pytest.raises(DaemonError):
            client.list_datasets()
    with DaemonClient(runtime_dir=daemon.runtime_dir) as client:  # the Unix socket needs no token
        assert client.health() == "SERVING"
    assert _status(endpoints)["endpoints"]["tcp_security"] == "tls+token"


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_insecure_tcp_is_plaintext_but_still_token_checked_and_warned(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent, "--tcp", "127.0.0.1:0", "--insecure")
    endpoints = daemon.start()
    assert endpoints.tcp_tls_cert is None
    token = Path(endpoints.token_file).read_text().strip()
    with DaemonClient(endpoints.grpc_tcp, token=token) as client:
        assert client.health() == "SERVING"
    with DaemonClient(endpoints.grpc_tcp) as client:
        with pytest.raises(DaemonRequestError, match="UNAUTHENTICATED|no token"):
            client.list_datasets()
    assert _status(endpoints)["endpoints"]["tcp_security"] == "plaintext+token (insecure)"
    assert "SECURITY: gRPC on tcp 127.0.0.1:0 is PLAINTEXT" in (daemon.runtime_dir / "daemon.log").read_text()


def test_a_certificate_without_its_key_is_refused_before_start(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(tmp_path / "run"),
            "--tcp",
            "127.0.0.1:0",
            "--tls-cert",
            str(tmp_path / "c.pem"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "tls_cert and tls_key go together" in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--shm-budget", "101%"], "a percentage must be between 0% and 100%, got '101%'"),
        (["--shm-budget", "0"], "a shared-memory budget of 0 lets no dataset load"),
        (["--idle-unload", "nan"], "idle_unload_s: Input should be a finite number"),
        (["--insecure"], "insecure, tls_cert and tls_key apply to the TCP listener: give tcp too"),
    ],
)
def test_daemon_settings_that_cannot_work_are_refused_with_one_clear_line(tmp_path, flags, message):
    result = subprocess.run(
        [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(tmp_path / "run"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "{" not in result.stderr  # no config dump


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_certificate_and_key_that_do_not_match_are_named(tmp_path):
    from graphtier.service.daemon.credentials import ensure_self_signed

    cert_a, _ = ensure_self_signed(tmp_path / "a", "127.0.0.1")
    _, key_b = ensure_self_signed(tmp_path / "b", "127.0.0.1")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(tmp_path / "run"),
            "--dataset-root",
            str(tmp_path),
            "--tcp",
            "127.0.0.1:0",
            "--tls-cert",
            str(cert_a),
            "--tls-key",
            str(key_b),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert f"TLS certificate {cert_a} and key {key_b} are not a usable pair" in result.stderr


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_user_token_acts_as_its_user_on_its_own_jobs_only(daemon_processes, small_rmat, tmp_path):
    """--user-tokens: a TCP caller presenting alice's token is alice (owner of the jobs she makes, refused
    bob's); the daemon's token stays the admin's. A file others may read, or a short token, is refused at
    start naming its line."""
    from graphtier.contract.jobs.spec import JobSpec

    tokens = tmp_path / "user-tokens"
    alice, bob = "a1" * 32, "b2" * 32
    tokens.write_text(f"# who may call over TCP\nalice {alice}\n\nbob {bob}\n")
    tokens.chmod(0o644)
    argv = [sys.executable, "-m", "graphtier.service.daemon", "--runtime-dir", str(tmp_path / "r")]
    loose = subprocess.run(
        [*argv, "--tcp", "127.0.0.1:0", "--user-tokens", str(tokens)], capture_output=True, text=True
    )
    assert loose.returncode == 2 and f"chmod 600 {tokens}" in loose.stderr, loose.stderr
    tokens.chmod(0o600)
    daemon = daemon_processes(small_rmat.directory.parent, "--tcp", "127.0.0.1:0", "--user-tokens", str(tokens))
    endpoints = daemon.start()
    cert = Path(endpoints.tcp_tls_cert)
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=1, nproc_per_node=1)
    with DaemonClient(endpoints.grpc_tcp, token=alice, tls_cert=cert) as as_alice:
        job, _ = as_alice.attach_job(spec, "single@elsewhere/pid7", 0, 0, "s" * 64)
        assert job.owner is not None and job.owner.name == "alice"
    with DaemonClient(endpoints.grpc_tcp, token=bob, tls_cert=cert) as as_bob:
        with pytest.raises(DaemonRequestError) as info:
            as_bob.cancel_job(job.job_id)
        assert info.value.code == "PERMISSION_DENIED" and "the job is alice's, and you are bob" in info.value.message
    admin = Path(endpoints.token_file).read_text().strip()
    with DaemonClient(endpoints.grpc_tcp, token=admin, tls_cert=cert) as operator:
        assert operator.cancel_job(job.job_id, "test done").state.value == "cancelled"
    short = tmp_path / "short-tokens"
    short.write_text("carol 1234\n")
    short.chmod(0o600)
    refused = subprocess.run(
        [*argv, "--tcp", "127.0.0.1:0", "--user-tokens", str(short)], capture_output=True, text=True
    )
    assert refused.returncode == 2 and f"{short}:1: the token of carol is 4 characters" in refused.stderr
