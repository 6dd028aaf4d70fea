"""Finding a running daemon: its home, its runtime directory and the files in it.

The daemon keeps its lock, socket, log and `endpoints.json` in its runtime directory and
writes them (`service/daemon/instance.py`); every client finds them through this module, so
client and daemon agree on one set of names and defaults without the client importing the
daemon. `graphtier cluster start` learns where a daemon it starts will keep them from the
daemon itself (`graphtierd --print-files`, a `DaemonFiles`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from graphtier.contract.runtime_dir import (  # noqa: F401 (re-exported: where every caller finds them)
    ENDPOINTS_FILE,
    LOCK_FILE,
    LOG_FILE,
    SOCKET_FILE,
    STATE_DIR,
    TOKEN_FILE,
    default_dataset_root,
    default_log_path,
    default_runtime_dir,
    default_socket_path,
    default_state_dir,
    default_token_path,
    graphtier_home,
    read_lock_pid,
    running_daemon_pid,
    unix_target,
)


class DaemonFiles(BaseModel):
    """Where a daemon keeps its files, its config's defaults applied; `graphtierd --print-files` prints it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runtime_dir: Path
    socket: Path
    log_file: Path
    token_file: Path
    state_dir: Path
    dataset_root: Path


class Endpoints(BaseModel):
    """Where a ready daemon listens; written to `<runtime_dir>/endpoints.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    pid: int
    started_at: datetime
    runtime_dir: str
    grpc_unix: str
    grpc_tcp: str | None = None
    tcp_tls_cert: str | None = None  # the TCP listener's certificate (clients' trust root); None = plaintext
    token_file: str | None = None  # the bearer token TCP callers present
    http_url: str
    log_file: str
    dataset_root: str

    @property
    def grpc_target(self) -> str:
        """The gRPC target of the Unix socket (`unix:/abs/path`)."""
        return unix_target(self.grpc_unix)


def read_endpoints(runtime_dir: Path) -> Endpoints | None:
    """The endpoints a daemon wrote into `runtime_dir`, or None when there are none (or they are unreadable)."""
    try:
        return Endpoints.model_validate_json((Path(runtime_dir) / ENDPOINTS_FILE).read_text())
    except (OSError, ValidationError, ValueError):
        return None


def describe_running(runtime_dir: Path, pid: int | None) -> str:
    """'pid N, gRPC ..., HTTP ...' for messages about a running daemon."""
    endpoints = read_endpoints(runtime_dir)
    who = f"pid {pid}" if pid and pid > 0 else "pid unknown"
    if endpoints is None or (pid and endpoints.pid != pid):
        return f"{who}, still starting (no endpoints.json yet)"
    tcp = f", gRPC tcp {endpoints.grpc_tcp}" if endpoints.grpc_tcp else ""
    return f"{who}, gRPC {endpoints.grpc_target}{tcp}, HTTP {endpoints.http_url}"


def daemon_file_dir(path: Path, runtime_dir: Path, gid: int | None = None) -> None:
    """Make the directory of a daemon file (log, socket) exist. The runtime directory is the
    daemon's and is made private; any other directory is created if missing (0700) but never
    changed: a --log-file in /var/log must not chmod /var/log."""
    if path == runtime_dir:
        private_runtime_dir(path, gid)
    else:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)


def private_runtime_dir(path: Path, gid: int | None = None) -> None:
    """Create `path` (and parents) and make it 0700: the socket, lock and log inside are the
    daemon's alone, whatever the umask or whoever created the directory first. With `gid`
    (the daemon's socket group) it is 0750 and owned by that group, so members reach the socket."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    mode = 0o700 if gid is None else 0o750
    if gid is not None and path.stat().st_gid != gid:
        os.chown(path, -1, gid)
    if path.stat().st_mode & 0o777 != mode:
        path.chmod(mode)


def remove_stale_daemon_files(runtime_dir: Path) -> list[Path]:
    """What a daemon of `runtime_dir` killed without its clean-up left: endpoints.json, the default
    socket and the lock file, removed under the lock (nothing while a daemon holds it); returns them."""
    path = Path(runtime_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return []
    removed = []
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []
        for stale in (Path(runtime_dir) / ENDPOINTS_FILE, default_socket_path(runtime_dir), path):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
                removed.append(stale)
    finally:
        os.close(fd)  # closing drops the flock
    return removed
