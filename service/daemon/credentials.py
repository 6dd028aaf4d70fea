"""Who may call the daemon over TCP: TLS for the channel, a bearer token for the caller.

The Unix socket is guarded by its file mode (0600 in a 0700 directory, or 0660/0750 for the
socket group): only the daemon's user, or the group's members, reach it; which of them calls is
told by the identity socket (identity.py). A TCP listener reaches the network, so every TCP call
must present a token (`authorization: Bearer <token>`, compared in constant time) over TLS:
the daemon's own token (its operator's: every job is theirs to act on) or a user's from the
operator's `user_tokens` file (that user's jobs only). Plaintext is allowed only with
`insecure: true`, and the daemon warns about it at start and in its status. The daemon's token
is generated once into a 0600 file; without a configured certificate the daemon makes a
self-signed one (ECDSA P-256, names: localhost, the loopback addresses, this host's name and the
listen address) whose file clients use as their trust root.
"""

from __future__ import annotations

import datetime as dt
import hmac
import ipaddress
import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from graphtier.contract.errors import DaemonError
from graphtier.contract.identity import AUTH_HEADER
from graphtier.service.daemon.rpc.user_tokens import UserTokens

TOKEN_FILE = "token"
TLS_DIR = "tls"


def _write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` readable by its owner only, replacing it atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def ensure_token(path: Path) -> str:
    """The token in `path`, created (256 random bits, hex) if missing; DaemonError if unusable."""
    if path.is_dir():
        raise DaemonError(f"{path}: the token file is a directory; give a file path (it is created if missing)")
    try:
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _write_private(path, secrets.token_hex(32).encode() + b"\n")
        if path.stat().st_mode & 0o077:
            raise DaemonError(f"{path}: the token file must be readable by its owner only (chmod 600 {path})")
        token = path.read_text().strip()
    except OSError as exc:
        raise DaemonError(f"{path}: cannot read or create the daemon's token ({exc.strerror or exc})") from None
    if len(token) < 32:
        raise DaemonError(f"{path}: the token is {len(token)} characters; use at least 32 (delete it to get a new one)")
    return token


def read_token(path: Path) -> str:
    """A client's reading of a token file; DaemonError naming the file when it cannot."""
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise DaemonError(f"{path}: cannot read the daemon token ({exc.strerror or exc})") from None


def _names(listen_host: str) -> tuple[list[str], list[str]]:
    dns = ["localhost", socket.gethostname()]
    ips = ["127.0.0.1", "::1"]
    try:
        ipaddress.ip_address(listen_host)
        if listen_host not in ("0.0.0.0", "::"):
            ips.append(listen_host)
    except ValueError:
        dns.append(listen_host)
    return sorted(set(dns)), sorted(set(ips))


def ensure_self_signed(directory: Path, listen_host: str) -> tuple[Path, Path]:
    """(certificate, key) in `directory`, made once: a self-signed server certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_path, key_path = directory / "server.crt", directory / "server.key"
    if cert_path.exists() and key_path.exists():
        return cert_path, key_path
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = ec.generate_private_key(ec.SECP256R1())
    dns, ips = _names(listen_host)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"graphtierd on {socket.gethostname()}")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=825))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(n) for n in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_private(
        key_path,
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def server_credentials(cert_path: Path, key_path: Path) -> grpc.ServerCredentials:
    """gRPC credentials of the pair; DaemonError naming the files when they are unreadable or do
    not belong together (gRPC itself would only say 'Failed to bind')."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        return grpc.ssl_server_credentials([(key_path.read_bytes(), cert_path.read_bytes())])
    except ssl.SSLError as exc:  # before OSError, of which it is a kind
        raise DaemonError(
            f"TLS certificate {cert_path} and key {key_path} are not a usable pair ({exc.reason})"
        ) from None
    except OSError as exc:
        raise DaemonError(f"cannot read the TLS certificate or key ({exc.filename or cert_path}: {exc})") from None


def _is_unix_peer(peer: str) -> bool:
    return peer.startswith("unix:") or peer.startswith("unix-abstract:")


class TokenInterceptor(grpc.ServerInterceptor):
    """Refuses every call that arrived over TCP without the daemon's token or a user's (UNAUTHENTICATED)."""

    def __init__(self, token: str, user_tokens: UserTokens | None = None) -> None:
        self._expected = f"Bearer {token}".encode()
        self._users = user_tokens

    def intercept_service(self, continuation: Callable[[Any], Any], details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        metadata = dict(details.invocation_metadata or ())
        presented = str(metadata.get(AUTH_HEADER, "")).encode()
        if hmac.compare_digest(presented, self._expected):
            return handler
        if self._users is not None and presented.startswith(b"Bearer "):
            if self._users.user_of(presented[len(b"Bearer ") :].decode(errors="replace")) is not None:
                return handler
        return _guarded(handler, presented != b"")


def _guarded(handler: grpc.RpcMethodHandler, presented: bool) -> grpc.RpcMethodHandler:
    """`handler`, answering UNAUTHENTICATED to any peer that is not on the Unix socket."""
    why = (
        "the token presented is not this daemon's (nor a user's)" if presented else "no token was presented"
    ) + "; TCP callers must send `authorization: Bearer <token>` (the daemon's token file, or a user's token)"

    def wrap(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            if not _is_unix_peer(context.peer()):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            return behaviour(request, context)

        return call

    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(
            wrap(handler.unary_unary), handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(
            wrap(handler.unary_stream), handler.request_deserializer, handler.response_serializer
        )
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(
            wrap(handler.stream_unary), handler.request_deserializer, handler.response_serializer
        )
    return grpc.stream_stream_rpc_method_handler(
        wrap(handler.stream_stream), handler.request_deserializer, handler.response_serializer
    )
