"""Who calls the daemon, as every side names it: the user a job belongs to, and how a caller on the
Unix socket proves which user it is.

Python's gRPC tells a server nothing of a Unix-socket peer (no peer credentials), so the daemon
serves a second socket beside its gRPC one, `<socket>.identity`. Whoever connects is sent, in one
JSON line (`SessionGreeting`), a session credential for the uid the kernel reports for that
connection (SO_PEERCRED): a uid the caller cannot choose. The caller sends the credential with
every gRPC call (`SESSION_HEADER`); the daemon alone holds the key it is signed with, it names the
uid, and it expires after `SESSION_LIFETIME_S`, so a client asks again before then. Over TCP a
caller is who its bearer token says: the daemon's own token is its operator's, a token of the
daemon's `user_tokens` file is that user's.
"""

from __future__ import annotations

import json
import pwd
from dataclasses import dataclass
from pathlib import Path

SESSION_HEADER = "graphtier-session"  # the gRPC metadata key a Unix-socket caller's credential travels in
AUTH_HEADER = "authorization"  # the key a TCP caller's token travels in, as `Bearer <token>`
IDENTITY_SUFFIX = ".identity"  # the identity socket is the gRPC socket's path plus this
SESSION_LIFETIME_S = 900.0  # how long a session credential is honoured after it is issued
MAX_GREETING_BYTES = 4096  # a greeting is one short line; a client reads no more than this


def identity_socket_path(grpc_socket: str | Path) -> Path:
    """The identity socket served beside the gRPC Unix socket `grpc_socket`."""
    grpc_socket = Path(grpc_socket)
    return grpc_socket.with_name(grpc_socket.name + IDENTITY_SUFFIX)


def user_name(uid: int) -> str:
    """The login name of `uid`, or the number itself when the user database has none (a container's uid)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


@dataclass(frozen=True)
class JobOwner:
    """The user a job belongs to: its name (the key owners are compared by) and uid, when known.

    A caller on the Unix socket is named by its uid's login name; one on TCP by the name its
    token is given in the daemon's `user_tokens` file (with the uid of the local user of that
    name, if there is one).
    """

    name: str
    uid: int | None = None

    def __str__(self) -> str:
        if self.uid is None:
            return self.name
        return f"uid {self.uid}" if self.name == str(self.uid) else f"{self.name} (uid {self.uid})"

    @classmethod
    def of_uid(cls, uid: int) -> JobOwner:
        return cls(user_name(uid), uid)


@dataclass(frozen=True)
class SessionGreeting:
    """What the identity socket sends: a credential for `uid` (named `user`), good for `lifetime_s`."""

    credential: str
    uid: int
    user: str
    lifetime_s: float

    def to_line(self) -> bytes:
        return json.dumps(self.__dict__).encode() + b"\n"

    @classmethod
    def from_line(cls, data: bytes, where: str) -> SessionGreeting:
        """The greeting in `data`; ValueError naming `where` when it is not one."""
        try:
            fields = json.loads(data.decode())
            greeting = cls(
                credential=str(fields["credential"]),
                uid=int(fields["uid"]),
                user=str(fields["user"]),
                lifetime_s=float(fields["lifetime_s"]),
            )
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise ValueError(f"{where} sent no session greeting ({data[:80]!r})") from None
        if not greeting.credential or greeting.lifetime_s <= 0:
            raise ValueError(f"{where} sent an empty session greeting")
        return greeting
