"""Finding a running daemon: its home, its runtime directory, its lock and `endpoints.json`.

The daemon writes these (`service/daemon/instance.py`); every client reads them through
this module, so client and daemon agree on one set of names without the client importing
the daemon.
"""

from __future__ import annotations

import fcntl
import os
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from graphtier.contract.environment import HOME_ENV


def graphtier_home() -> Path:
    """`$GRAPHTIER_HOME`, or `~/.graphtier` (the same home `graphtier dataset` uses)."""
    home = os.environ.get(HOME_ENV)
    return Path(home).expanduser() if home else Path.home() / ".graphtier"


def default_runtime_dir() -> Path:
    """`$GRAPHTIER_HOME/run`: the daemon's socket, lock, endpoints and log."""
    return graphtier_home() / "run"


def default_dataset_root() -> Path:
    """`$GRAPHTIER_HOME/datasets`, where `graphtier dataset prepare` writes."""
    return graphtier_home() / "datasets"


LOCK_FILE = "daemon.lock"
ENDPOINTS_FILE = "endpoints.json"


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
        return f"unix:{self.grpc_unix}"


def read_endpoints(runtime_dir: Path) -> Endpoints | None:
    """The endpoints a daemon wrote into `runtime_dir`, or None when there are none (or they are unreadable)."""
    try:
        return Endpoints.model_validate_json((Path(runtime_dir) / ENDPOINTS_FILE).read_text())
    except (OSError, ValidationError, ValueError):
        return None


def running_daemon_pid(runtime_dir: Path) -> int | None:
    """Pid of the daemon holding `runtime_dir`'s lock, or None when no daemon holds it.

    Probes with a shared non-blocking lock, which fails exactly while a daemon holds its
    exclusive one; the probe is released at once.
    """
    path = Path(runtime_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_lock_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def read_lock_pid(fd: int) -> int | None:
    """The pid a daemon wrote into its lock file (open as `fd`), or None."""
    text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None
