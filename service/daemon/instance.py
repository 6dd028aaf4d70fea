"""One daemon per runtime directory: the lock file, the endpoints file, and stale-file cleanup.

`InstanceLock` holds an exclusive `fcntl.flock` on `<runtime_dir>/daemon.lock` for the
daemon's life and writes its pid there; the kernel drops the lock when the process dies,
even by `kill -9`, so whoever gets the lock next knows every file left behind is stale.
`endpoints.json` is written (atomically) only once the daemon is ready, so a client that
finds it can connect. The state directory (the job history) is locked the same way, in
`<state_dir>/daemon.lock` with the holder's pid and runtime directory: two daemons never write
one history, whatever runtime directories they were given.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

from graphtier.contract.endpoints import (
    ENDPOINTS_FILE,
    LOCK_FILE,
    Endpoints,
    describe_running,
    private_runtime_dir,
    read_lock_pid,
)
from graphtier.contract.errors import DaemonAlreadyRunningError, DaemonError
from graphtier.service.daemon.config import DaemonConfig


def write_endpoints(runtime_dir: Path, endpoints: Endpoints) -> Path:
    """Write endpoints.json atomically (temporary file + rename): readers never see half a file."""
    path = Path(runtime_dir) / ENDPOINTS_FILE
    tmp = path.with_name(f".{ENDPOINTS_FILE}.{os.getpid()}.tmp")
    tmp.write_text(endpoints.model_dump_json(indent=2) + "\n")
    os.replace(tmp, path)
    return path


def _socket_answers(path: Path) -> bool:
    """True when something accepts connections on the Unix socket `path` (it is not stale)."""
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


class InstanceLock:
    """The exclusive lock that makes a daemon the only one for its runtime directory."""

    def __init__(self, config: DaemonConfig, *, wait_s: float = 0.5) -> None:
        self.config = config
        self.runtime_dir = config.runtime_dir
        self.path = self.runtime_dir / LOCK_FILE
        self._gid = config.socket_gid
        self._wait_s = wait_s
        self._fd: int | None = None
        self._state_fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> list[Path]:
        """Take the lock (DaemonAlreadyRunningError naming the holder if another daemon has it),
        record this pid, and remove what a dead daemon left; returns the stale files removed."""
        try:
            private_runtime_dir(self.runtime_dir, self._gid)
        except OSError as exc:
            raise DaemonError(f"{self.runtime_dir}: cannot create the runtime directory ({exc.strerror})") from None
        deadline = time.monotonic() + self._wait_s  # rides over a client's momentary probe
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = read_lock_pid(fd)
                os.close(fd)
                if time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise DaemonAlreadyRunningError(
                    f"a graphtier daemon is already running for {self.runtime_dir} "
                    f"({describe_running(self.runtime_dir, pid)}); stop it with `graphtier cluster stop` "
                    "or start this one with another --runtime-dir"
                ) from None
            if self._same_file(fd):
                break
            os.close(fd)  # the previous holder unlinked the file between our open and lock: retry
        self._fd = fd
        if _socket_answers(self.config.socket):  # another daemon (another runtime dir) serves on it
            self._fd = None
            os.close(fd)
            raise DaemonAlreadyRunningError(
                f"the socket {self.config.socket} is in use by another running process; give this daemon its own "
                "--socket (or stop the other one)"
            )
        try:
            self._state_fd = self._lock_state_dir()
        except BaseException:  # give the runtime directory back as it was found
            self._fd = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            os.close(fd)
            raise
        stale = self._remove_stale_files()
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return stale

    def _lock_state_dir(self) -> int:
        """Lock the state directory for this daemon (DaemonAlreadyRunningError naming its holder)."""
        state = self.config.state_path
        try:
            state.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(state / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise DaemonError(f"{state}: cannot create the state directory's lock ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid, _, runtime_dir = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip().partition("\n")
            os.close(fd)
            holder = f"pid {pid}" if pid.isdigit() else "pid unknown"
            raise DaemonAlreadyRunningError(
                f"the state directory {state} is in use by another graphtier daemon ({holder}, runtime directory "
                f"{runtime_dir or 'unknown'}); give this daemon its own --state-dir (or stop the other one)"
            ) from None
        # The file stays when the lock is dropped: unlinking it would let two daemons lock two files.
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n{self.runtime_dir}\n".encode(), 0)
        return fd

    def still_held(self) -> bool:
        """True while the lock file this daemon holds is still the one at its path. False when the
        runtime directory was removed or replaced: no client can find, reach or stop the daemon."""
        return self._fd is not None and self._same_file(self._fd)

    def _same_file(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    def _remove_stale_files(self) -> list[Path]:
        removed = []
        for path in (self.runtime_dir / ENDPOINTS_FILE, self.config.socket):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        return removed

    def publish(self, endpoints: Endpoints) -> Path:
        """Write endpoints.json: the daemon is ready."""
        if self._fd is None:
            raise DaemonError("cannot publish endpoints without holding the runtime directory's lock")
        return write_endpoints(self.runtime_dir, endpoints)

    def unpublish(self) -> None:
        """Remove endpoints.json: the daemon is stopping, new clients should not find it."""
        with contextlib.suppress(FileNotFoundError):
            (self.runtime_dir / ENDPOINTS_FILE).unlink()

    def release(self) -> None:
        """Remove endpoints, socket and lock file, then drop the lock; idempotent."""
        if self._fd is None:
            return
        self._remove_stale_files()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self._fd)  # closing drops the flock
        self._fd = None
        if self._state_fd is not None:
            os.close(self._state_fd)
            self._state_fd = None
