"""File descriptors handed from the process that owns memory to the processes that map it.

Some memory can only be shared as an open file: a CUDA VMM allocation exported as a POSIX fd
(`cuMemExportToShareableHandle`), or the read-write fd of a sealed host segment that a GPU
without read-only host registration must register (reopening the 0400 file would need root).
The owner keeps such fds in an `FdExporter`, which answers on a Unix SEQPACKET socket; a
consumer asks for them by export id (`fetch_fds`) and receives duplicates through SCM_RIGHTS
(`socket.send_fds` / `recv_fds`). Fds cross PID namespaces and need no ptrace rights, which
legacy CUDA IPC handles and `pidfd_getfd` do. Who may ask is decided by the socket file's mode
(0600: the owner's user) and the directory it lives in.

Request: {"export_ids": [...]}. Reply: {"ids": [...]} with one fd per id in that order, or
{"error": "..."} naming the first id it does not export, with no fds.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading

from graphtier.contract.errors import SharedMemoryError

MAX_FDS_PER_REQUEST = 64  # well under the kernel's SCM_MAX_FD (253)
_MAX_MESSAGE = 64 * 1024
_POLL_S = 0.2


class FdExporter:
    """Serves duplicates of the fds it holds, by export id, on the Unix socket `path`; `close()` stops it.

    The exporter owns the fds it is given (`add` takes a duplicate, `remove` and `close` close
    them); a fd already passed lives on in the receiver until the receiver closes it.
    """

    def __init__(self, path: str, *, mode: int = 0o600, gid: int | None = None) -> None:
        """Serve on `path` with file `mode`, group-owned by `gid` when given (e.g. 0o660 and the
        daemon's socket group, so its group's ranks may fetch)."""
        self.path = path
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self._closed = threading.Event()
        with contextlib.suppress(FileNotFoundError):
            if os.path.exists(path) and not _serving(path):
                os.unlink(path)  # left by an exporter that died
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.bind(path)
            os.chmod(path, mode)
            if gid is not None:
                os.chown(path, -1, gid)
            self._sock.listen(16)
        except OSError as exc:
            self._sock.close()
            raise SharedMemoryError(f"cannot serve memory fds on {path}: {exc.strerror or exc}") from None
        self._sock.settimeout(_POLL_S)
        self._thread = threading.Thread(target=self._serve, name="graphtier-fd-exporter", daemon=True)
        self._thread.start()

    def add(self, export_id: str, fd: int) -> None:
        """Export a duplicate of `fd` under `export_id` (the caller keeps, and closes, its own fd)."""
        if not export_id or len(export_id) > 200:
            raise SharedMemoryError(f"export id {export_id!r} must be 1-200 characters")
        duplicate = os.dup(fd)
        with self._lock:
            if self._closed.is_set() or export_id in self._fds:
                os.close(duplicate)
                why = "the exporter is closed" if self._closed.is_set() else "it is exported already"
                raise SharedMemoryError(f"cannot export fd {export_id!r}: {why}")
            self._fds[export_id] = duplicate

    def remove(self, export_id: str) -> None:
        """Stop exporting `export_id` and close the exporter's fd; idempotent."""
        with self._lock:
            fd = self._fds.pop(export_id, None)
        if fd is not None:
            os.close(fd)

    def exported(self) -> list[str]:
        with self._lock:
            return sorted(self._fds)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # the listening socket was closed
            with conn:
                with contextlib.suppress(OSError):
                    self._answer(conn)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5.0)
        while data := conn.recv(_MAX_MESSAGE):
            try:
                ids = json.loads(data)["export_ids"]
                if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                    raise ValueError("export_ids must be a list of strings")
                if len(ids) > MAX_FDS_PER_REQUEST:
                    raise ValueError(f"at most {MAX_FDS_PER_REQUEST} fds per request, asked for {len(ids)}")
            except (ValueError, KeyError, TypeError) as exc:
                conn.sendall(json.dumps({"error": f"malformed request: {exc}"}).encode())
                continue
            with self._lock:
                missing = next((i for i in ids if i not in self._fds), None)
                fds = [self._fds[i] for i in ids] if missing is None else []
                if missing is None:  # under the lock: a concurrent remove() cannot close them mid-send
                    socket.send_fds(conn, [json.dumps({"ids": ids}).encode()], fds)
            if missing is not None:
                conn.sendall(json.dumps({"error": f"{missing!r} is not exported here"}).encode())

    def close(self) -> None:
        """Stop serving, remove the socket file and close every exported fd; idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.close()
        self._thread.join(timeout=5 * _POLL_S)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        with self._lock:
            fds, self._fds = self._fds, {}
        for fd in fds.values():
            os.close(fd)

    def __enter__(self) -> FdExporter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _serving(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def fetch_fds(path: str, export_ids: list[str], *, timeout: float = 10.0) -> list[int]:
    """Ask the exporter on `path` for the fds of `export_ids`; new fds in this process, in order
    (the caller closes them). SharedMemoryError says why when the exporter is gone or refuses."""
    if not export_ids:
        return []
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(timeout)
    try:
        try:
            sock.connect(path)
            sock.sendall(json.dumps({"export_ids": list(export_ids)}).encode())
            data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, len(export_ids))
        except OSError as exc:
            raise SharedMemoryError(
                f"cannot fetch memory fds {export_ids} from {path}: {exc.strerror or exc} (has their owner exited?)"
            ) from None
    finally:
        sock.close()
    try:
        reply = json.loads(data) if data else {"error": "the exporter closed the connection"}
        if "error" in reply or reply.get("ids") != list(export_ids) or len(fds) != len(export_ids):
            raise SharedMemoryError(f"{path} refused memory fds {export_ids}: {reply.get('error', reply)}")
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return list(fds)
