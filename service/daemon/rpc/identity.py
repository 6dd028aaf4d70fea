"""Who a call comes from: the identity socket, which tells a Unix-socket caller a session credential for
its kernel-reported uid, and `Callers`, which names the caller of every gRPC call.

The protocol is the contract's (`graphtier.contract.identity`). A caller is

- a user, by a session credential (Unix socket): the uid the kernel reported (SO_PEERCRED) when the
  caller connected to the identity socket, signed by a key that exists only in this daemon's memory
  (a restarted daemon honours none of the last one's), and only until it expires;
- a user, by a token of the daemon's `user_tokens` file (TCP);
- the daemon's operator, by the daemon's own token (TCP: cluster peers, an operator's client);
- nobody in particular otherwise: a Unix-socket caller that sent no credential (an older client, a
  raw gRPC call). It may read what the status page shows anyone, and nothing that is a user's.

Admins act on every user's jobs: root, the daemon's own user (which its producers and the ranks of
the jobs it runs are), members of the daemon's `admin_group`, and the daemon's token.
"""

from __future__ import annotations

import contextlib
import grp
import hashlib
import hmac
import logging
import os
import pwd
import secrets
import socket
import stat
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from graphtier.contract.errors import DaemonError
from graphtier.contract.identity import (
    AUTH_HEADER,
    SESSION_HEADER,
    SESSION_LIFETIME_S,
    JobOwner,
    SessionGreeting,
    user_name,
)
from graphtier.service.daemon.rpc.user_tokens import UserTokens

log = logging.getLogger("graphtierd")

_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_ADMIN_CACHE_S = 30.0  # how long a uid's admin-group membership is trusted before it is looked up again


class SessionSigner:
    """Issues and checks session credentials: `v1.<uid>.<expiry>.<HMAC-SHA256>` under a key made at start."""

    def __init__(self, lifetime_s: float = SESSION_LIFETIME_S) -> None:
        self._key = secrets.token_bytes(32)
        self.lifetime_s = lifetime_s

    def _mac(self, uid: int, expires: int) -> str:
        return hmac.new(self._key, f"v1.{uid}.{expires}".encode(), hashlib.sha256).hexdigest()

    def issue(self, uid: int) -> str:
        expires = int(time.time() + self.lifetime_s)
        return f"v1.{uid}.{expires}.{self._mac(uid, expires)}"

    def verify(self, credential: str) -> tuple[int | None, str]:
        """(the uid, "") for a credential this daemon issued that has not expired, else (None, why not)."""
        parts = credential.split(".")
        if len(parts) != 4 or parts[0] != "v1" or not parts[1].isdigit() or not parts[2].isdigit():
            return None, "the session credential sent is malformed"
        uid, expires = int(parts[1]), int(parts[2])
        if not hmac.compare_digest(parts[3].encode(), self._mac(uid, expires).encode()):
            return None, "the session credential sent was not issued by this daemon (was it restarted?)"
        if expires < time.time():
            return None, f"the session credential sent expired {time.time() - expires:.0f} s ago"
        return uid, ""


class IdentityListener:
    """The identity socket: to each connection, one greeting for the uid the kernel reports, then close.

    Nothing is read from the caller, so there is nothing to parse or to wait for; a greeting is a
    few hundred bytes, which the socket's buffer takes at once."""

    def __init__(self, path: Path, signer: SessionSigner, *, gid: int | None = None) -> None:
        self.path, self.signer, self.gid = path, signer, gid
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        _remove_stale_socket(self.path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(str(self.path))
            if self.gid is not None:
                os.chown(self.path, -1, self.gid)
            os.chmod(self.path, 0o600 if self.gid is None else 0o660)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise DaemonError(f"cannot serve the identity socket {self.path}: {exc.strerror or exc}") from None
        sock.settimeout(0.5)  # the accept loop looks at the stop flag this often
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="graphtier-identity", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.05)  # out of file descriptors, say: do not spin
                continue
            with conn:
                try:
                    self._greet(conn)
                except Exception:  # one caller's trouble must not end the listener
                    log.debug("identity socket: a greeting failed", exc_info=True)

    def _greet(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)
        _pid, uid, _gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
        greeting = SessionGreeting(self.signer.issue(uid), uid, user_name(uid), self.signer.lifetime_s)
        conn.sendall(greeting.to_line())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _remove_stale_socket(path: Path) -> None:
    """Unlink a socket left at `path` by a daemon that died (the runtime directory's lock is ours);
    DaemonError for anything else there, which is never removed."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise DaemonError(f"{path} exists and is not a socket; nothing was removed: move it away")
    path.unlink()


@dataclass(frozen=True)
class Caller:
    """Who one call comes from: the user (None: not identified, `problem` says why) and whether an admin."""

    user: JobOwner | None
    admin: bool
    how: str  # how the daemon knows: "uid 1000 on the Unix socket", "user token", "the daemon's token"
    problem: str = ""  # for a caller not identified: what was missing or wrong

    def __str__(self) -> str:
        if self.user is None:
            return f"an unidentified caller ({self.problem})"
        return f"{self.user}{' (an admin)' if self.admin else ''}"


def _is_unix_peer(peer: str) -> bool:
    return peer.startswith(("unix:", "unix-abstract:"))


class Callers:
    """Names the caller of each gRPC call and says who the admins are (see the module docstring)."""

    def __init__(
        self,
        signer: SessionSigner,
        *,
        admin_gid: int | None = None,
        daemon_token: str | None = None,
        user_tokens: UserTokens | None = None,
    ) -> None:
        self.signer, self.admin_gid, self.user_tokens = signer, admin_gid, user_tokens
        self.daemon_uid = os.geteuid()
        self._daemon_bearer = f"Bearer {daemon_token}".encode() if daemon_token else None
        self._admins: dict[int, tuple[bool, float]] = {}
        self._lock = threading.Lock()

    def admins(self) -> str:
        """Who the admins are, for messages: `root, graphtier (the daemon's user), group ml-admins`."""
        names = ["root"] if self.daemon_uid == 0 else ["root", f"{user_name(self.daemon_uid)} (the daemon's user)"]
        if self.admin_gid is not None:
            names.append(f"members of group {_group_name(self.admin_gid)}")
        return ", ".join(names)

    def is_admin(self, uid: int) -> bool:
        if uid in (0, self.daemon_uid):
            return True
        if self.admin_gid is None:
            return False
        now = time.monotonic()
        with self._lock:
            known = self._admins.get(uid)
        if known is not None and now - known[1] < _ADMIN_CACHE_S:
            return known[0]
        member = _in_group(uid, self.admin_gid)
        with self._lock:
            self._admins[uid] = (member, now)
        return member

    def of(self, context: grpc.ServicerContext) -> Caller:
        """The caller of the call `context` serves."""
        metadata = dict(context.invocation_metadata() or ())
        bearer = str(metadata.get(AUTH_HEADER, "")).encode()
        if self._daemon_bearer is not None and hmac.compare_digest(bearer, self._daemon_bearer):
            return Caller(JobOwner.of_uid(self.daemon_uid), True, "the daemon's token")
        unix = _is_unix_peer(context.peer())
        if not unix:  # the token interceptor let it in: a user token (or the daemon's, above)
            token = bearer.decode(errors="replace").removeprefix("Bearer ")
            name = self.user_tokens.user_of(token) if self.user_tokens else None
            if name is None:
                return Caller(None, False, "TCP", "no token this daemon knows")
            uid = _local_uid(name)
            return Caller(JobOwner(name, uid), uid is not None and self.is_admin(uid), "a user token")
        credential = str(metadata.get(SESSION_HEADER, ""))
        if not credential:
            return Caller(None, False, "Unix socket", "no session credential was sent")
        uid, problem = self.signer.verify(credential)
        if uid is None:
            return Caller(None, False, "Unix socket", problem)
        return Caller(JobOwner.of_uid(uid), self.is_admin(uid), f"uid {uid} on the Unix socket")


def _local_uid(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _in_group(uid: int, gid: int) -> bool:
    """True when `uid`'s primary group is `gid` or the group database lists its user as a member."""
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return False
    if entry.pw_gid == gid:
        return True
    try:
        return entry.pw_name in grp.getgrgid(gid).gr_mem
    except KeyError:
        return False
