"""Notifications between producer and consumer: JSON messages over a Unix SEQPACKET socket.

SEQPACKET keeps message boundaries and is connection-oriented, so each side learns at once
when the other dies (the kernel closes its end: recv returns EOF), and every wait takes a
timeout: no busy-waiting and no hang. The producer listens on `<channel dir>/producer.sock`
and accepts exactly one consumer.

Producer -> consumer: {"kind": "ready", "slot", "batch", "generation", "layout"?},
{"kind": "epoch_end", "epoch"}, {"kind": "end"}, {"kind": "error", "message"}.
Consumer -> producer: {"kind": "hello", "pid"}, {"kind": "release", "slot"}, {"kind": "bye"}.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
from typing import Any

from graphtier.service.pipeline.errors import ChannelError

MAX_MESSAGE_BYTES = 64 * 1024
_CLOSED_ERRNOS = (errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ENOTCONN, errno.EBADF)
_MAX_SOCKET_PATH = 107  # sun_path is 108 bytes including the terminating NUL
Received = dict[str, Any]  # a message as decoded: a JSON object, its values of whatever JSON type was sent


class ConnectionClosed(Exception):
    """The peer closed its end of the channel socket (or died)."""


def _check_path(path: str) -> None:
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        raise ChannelError(
            f"socket path {path!r} is {len(os.fsencode(path))} bytes long; Unix sockets allow {_MAX_SOCKET_PATH}: "
            "use a shorter channel directory"
        )


class MessageSocket:
    """One connected SEQPACKET socket carrying JSON dict messages."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def fileno(self) -> int:
        return self._sock.fileno()

    def send(self, message: dict[str, object]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ChannelError(f"channel message of {len(data)} bytes exceeds {MAX_MESSAGE_BYTES}")
        self._sock.settimeout(None)
        try:
            self._sock.sendall(data, socket.MSG_NOSIGNAL)
        except OSError as exc:
            if exc.errno not in _CLOSED_ERRNOS:
                raise
            raise ConnectionClosed(str(exc)) from None

    def recv(self, timeout: float | None) -> Received | None:
        """The next message; None when `timeout` seconds pass first; ConnectionClosed on EOF."""
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(MAX_MESSAGE_BYTES)
        except (TimeoutError, BlockingIOError):
            return None
        except OSError as exc:
            if exc.errno not in _CLOSED_ERRNOS:
                raise
            raise ConnectionClosed(str(exc)) from None
        if not data:
            raise ConnectionClosed("the peer closed the channel")
        try:
            message = json.loads(data)
        except ValueError as exc:
            raise ChannelError(f"malformed channel message {data[:80]!r}: {exc}") from None
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            raise ChannelError(f"channel message without a 'kind': {data[:80]!r}")
        return message

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


class Listener:
    """The producer's listening socket at `path`; removed again on close."""

    def __init__(self, path: str) -> None:
        _check_path(path)
        self.path = path
        self._remove_stale(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._sock.bind(path)
            self._sock.listen(1)
        except OSError as exc:
            self._sock.close()
            raise ChannelError(f"cannot listen on {path}: {exc.strerror}") from None
        self._bound_inode = os.stat(path).st_ino

    @staticmethod
    def _remove_stale(path: str) -> None:
        """Remove a socket file left by a dead producer; refuse one a live producer serves."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise ChannelError(f"{path} exists and is not a socket; choose another channel directory")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        finally:
            probe.close()
        raise ChannelError(f"{path} is in use by another producer; each channel needs its own directory")

    def accept(self, timeout: float) -> MessageSocket | None:
        """The consumer's connection, or None after `timeout` seconds."""
        self._sock.settimeout(timeout)
        try:
            conn, _ = self._sock.accept()
        except TimeoutError:
            return None
        return MessageSocket(conn)

    def close(self) -> None:
        """Stop listening and remove the socket file (only if it is still ours)."""
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            if os.stat(self.path).st_ino == self._bound_inode:
                os.unlink(self.path)


def connect(path: str) -> MessageSocket:
    """Connect to a producer's socket; ConnectionRefusedError/FileNotFoundError propagate."""
    _check_path(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return MessageSocket(sock)
