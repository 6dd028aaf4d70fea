"""The operator's `user_tokens` file: who a TCP caller is, by the token it presents (credentials.py
checks that it presents one, identity.py names the user)."""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from pathlib import Path

from graphtier.contract.errors import DaemonConfigError

log = logging.getLogger("graphtierd")

MIN_TOKEN_CHARS = 32
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}")


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class UserTokens:
    """The operator's `user_tokens` file: one `USER TOKEN` line per user (`#` comments, blank lines).

    A TCP caller presenting one of the tokens acts as that user: its own jobs, nobody else's. The
    file must be its owner's alone (like the daemon's token); each token has at least 32 characters
    and names one user. It is read at start (a bad file stops the daemon, naming the line) and again
    when it changes (a bad change is logged and the last good tokens kept), so users are added and
    removed without a restart. Tokens are kept as SHA-256 digests: a lookup hashes what was
    presented and compares digests, so no comparison depends on how much of a token was right.
    """

    def __init__(self, path: Path, *, daemon_token: str | None = None) -> None:
        self.path = path
        self._daemon_digest = _digest(daemon_token) if daemon_token else None
        self._lock = threading.Lock()
        self._checked = 0.0
        self._stamp, self._users = self._read()

    def _read(self) -> tuple[tuple[int, int], dict[bytes, str]]:
        try:
            info = self.path.stat()
            if not self.path.is_file():
                raise DaemonConfigError(f"{self.path}: user_tokens must be a file of `USER TOKEN` lines")
            if info.st_mode & 0o077:
                raise DaemonConfigError(
                    f"{self.path}: the user tokens file must be readable by its owner only (chmod 600 {self.path})"
                )
            text = self.path.read_text()
        except OSError as exc:
            raise DaemonConfigError(f"{self.path}: cannot read the user tokens ({exc.strerror or exc})") from None
        users: dict[bytes, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            where = f"{self.path}:{number}"
            if len(fields) != 2:
                raise DaemonConfigError(f"{where}: give `USER TOKEN` (two fields), got {len(fields)}")
            name, token = fields
            if not _USER_NAME.fullmatch(name):
                raise DaemonConfigError(f"{where}: {name[:70]!r} is no user name (letters, digits, _ . @ -)")
            if len(token) < MIN_TOKEN_CHARS:
                raise DaemonConfigError(
                    f"{where}: the token of {name} is {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
                    "(e.g. `openssl rand -hex 32`)"
                )
            digest = _digest(token)
            if digest == self._daemon_digest:
                raise DaemonConfigError(f"{where}: the token of {name} is the daemon's own, which is the admin's")
            if digest in users:
                raise DaemonConfigError(f"{where}: the token of {name} is also {users[digest]}'s; give each its own")
            users[digest] = name
        return (info.st_mtime_ns, info.st_size), users

    def user_of(self, token: str) -> str | None:
        """The user `token` is given to, None when it is nobody's."""
        self._reload_if_changed()
        with self._lock:
            return self._users.get(_digest(token)) if token else None

    def _reload_if_changed(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._checked < 1.0:
                return
            self._checked = now
        try:
            info = self.path.stat()
        except OSError:
            return  # keep the last good tokens; the change is logged once it can be read
        if (info.st_mtime_ns, info.st_size) == self._stamp:
            return
        try:
            stamp, users = self._read()
        except DaemonConfigError as exc:
            log.error("user tokens not reloaded, the last good ones stay: %s", exc)
            with self._lock:
                self._stamp = (info.st_mtime_ns, info.st_size)
            return
        with self._lock:
            self._stamp, self._users = stamp, users
        log.info("user tokens reloaded from %s: %d user(s)", self.path, len(users))
