"""`SessionSource`: the session credential a client on the daemon's Unix socket sends with its calls.

The daemon's identity socket (`<socket>.identity`, graphtier.contract.identity) tells whoever
connects a credential for the uid the kernel reports for it; the client keeps it and asks again
once half its lifetime has passed, or when the daemon no longer honours it (a restarted daemon).
A daemon without an identity socket gets no credential, and says what needs one.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from graphtier.contract.identity import MAX_GREETING_BYTES, SESSION_HEADER, SessionGreeting

GREETING_TIMEOUT_S = 5.0  # a daemon that sends no greeting this long is not answering; the call says so


class SessionSource:
    """The credential for calls on one Unix socket; thread-safe."""

    def __init__(self, identity_socket: Path) -> None:
        self.path = identity_socket
        self._lock = threading.Lock()
        self._credential = ""
        self._renew_at = 0.0
        self.user = ""  # the user the daemon knows this process as, once asked

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The credential as call metadata; () when the daemon tells none."""
        with self._lock:
            if not self._credential or time.monotonic() >= self._renew_at:
                self._ask()
            return ((SESSION_HEADER, self._credential),) if self._credential else ()

    def forget(self) -> None:
        """Drop the credential: the daemon refused it; the next call asks again."""
        with self._lock:
            self._credential, self._renew_at = "", 0.0

    def _ask(self) -> None:
        started = time.monotonic()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(GREETING_TIMEOUT_S)
                conn.connect(str(self.path))
                data = b""
                while b"\n" not in data and len(data) < MAX_GREETING_BYTES:
                    chunk = conn.recv(MAX_GREETING_BYTES - len(data))
                    if not chunk:
                        break
                    data += chunk
            greeting = SessionGreeting.from_line(data, str(self.path))
        except (OSError, ValueError):
            self._credential, self._renew_at = "", 0.0  # the call goes without; the daemon says what it needs
            return
        self._credential, self.user = greeting.credential, greeting.user
        self._renew_at = started + greeting.lifetime_s / 2
