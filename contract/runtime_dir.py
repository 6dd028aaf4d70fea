"""Where a daemon keeps its files, found without pydantic: the home, the runtime directory, the
file names in it and the lock that says whether a daemon holds it.

The pydantic models of those files (`Endpoints`, `DaemonFiles`) are in `endpoints.py`, which
re-exports every name here; this module stays import-light so `graphtier job status` finds
its daemon in a few milliseconds.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

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
SOCKET_FILE = "daemon.sock"
LOG_FILE = "daemon.log"
TOKEN_FILE = "token"
STATE_DIR = "state"  # beside the runtime directory, not in it: the job history outlives a removed runtime dir


def default_socket_path(runtime_dir: Path) -> Path:
    """`<runtime_dir>/daemon.sock`: the gRPC Unix socket unless the config moves it."""
    return Path(runtime_dir) / SOCKET_FILE


def default_log_path(runtime_dir: Path) -> Path:
    """`<runtime_dir>/daemon.log` unless the config moves it."""
    return Path(runtime_dir) / LOG_FILE


def default_token_path(runtime_dir: Path) -> Path:
    """`<runtime_dir>/token`: the bearer token TCP callers present, unless the config moves it."""
    return Path(runtime_dir) / TOKEN_FILE


def default_state_dir(runtime_dir: Path) -> Path:
    """The job history across restarts, unless the config moves it: `<parent>/state` beside a runtime
    directory named `run` (`$GRAPHTIER_HOME/state`), `<parent>/state-<name>` beside any other, so
    sibling runtime directories (`P/r1`, `P/r2`) never share one."""
    runtime_dir = Path(runtime_dir)
    name = STATE_DIR if runtime_dir.name in ("run", "") else f"{STATE_DIR}-{runtime_dir.name}"
    return runtime_dir.parent / name


def running_daemon_pid(runtime_dir: Path) -> int | None:
    """Pid of the daemon holding `runtime_dir`'s lock, or None when no daemon holds it.

    Probes with a shared non-blocking lock, which fails exactly while a daemon holds its
    exclusive one; the probe is released at once. The lock file is the daemon's user's alone (a
    member of its socket group who could hold it could keep a daemon from starting); such a caller
    is told by the endpoints the daemon published, when their pid is alive.
    """
    path = Path(runtime_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except PermissionError:
        return _published_pid(Path(runtime_dir))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return read_lock_pid(fd) or -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _published_pid(runtime_dir: Path) -> int | None:
    """The pid endpoints.json names, if that process lives (as another user's: kill answers EPERM)."""
    address = read_daemon_address(runtime_dir)
    if address is None or address.pid <= 0:
        return None
    try:
        os.kill(address.pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return address.pid


def read_lock_pid(fd: int) -> int | None:
    """The pid a daemon wrote into its lock file (open as `fd`), or None."""
    text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


@dataclass(frozen=True)
class DaemonAddress:
    """What a client reads of a ready daemon's `endpoints.json` to call it: the fields of `Endpoints`
    (endpoints.py, the file's schema) it needs, read without pydantic."""

    pid: int
    grpc_unix: str
    http_url: str

    @property
    def grpc_target(self) -> str:
        """The gRPC target of the Unix socket (`unix:/abs/path`)."""
        return unix_target(self.grpc_unix)


def unix_target(socket_path: str) -> str:
    """The gRPC target of a Unix socket."""
    return f"unix:{socket_path}"


def read_daemon_address(runtime_dir: Path) -> DaemonAddress | None:
    """The address a daemon wrote into `runtime_dir`'s endpoints.json, or None when there is none (or
    it is unreadable, or a field has the wrong type), as `endpoints.read_endpoints` answers."""
    try:
        written = json.loads((Path(runtime_dir) / ENDPOINTS_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(written, dict):
        return None
    pid, grpc_unix, http_url = written.get("pid"), written.get("grpc_unix"), written.get("http_url")
    if type(pid) is not int or not isinstance(grpc_unix, str) or not isinstance(http_url, str):
        return None
    return DaemonAddress(pid=pid, grpc_unix=grpc_unix, http_url=http_url)
