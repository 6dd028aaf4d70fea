"""Errors of the daemon and its clients, each naming what is wrong and where.

They derive from `GraphtierError`, so the CLI turns them into one clear line and a
non-zero exit; the gRPC servicers map each to its status code (`grpc_status.py`).
"""

from __future__ import annotations

from graphtier.service.errors import GraphtierError


class DaemonError(GraphtierError):
    """Base class of the daemon's errors."""


class DaemonConfigError(DaemonError):
    """A daemon config file or flag that cannot be used."""


class DaemonAlreadyRunningError(DaemonError):
    """Another daemon holds the runtime directory's lock."""


class DaemonNotRunningError(DaemonError):
    """No daemon answers at the runtime directory or address a client was given."""


class DaemonRequestError(DaemonError):
    """The daemon refused or failed a request; `code` is the gRPC status code name."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"{message} [{code}]")


class InvalidRequestError(DaemonError):
    """A request with a value the daemon cannot use (a malformed name, an impossible number)."""


class UnknownDatasetError(DaemonError):
    """A dataset that is not prepared under the daemon's root, or not loaded."""


class DatasetConflictError(DaemonError):
    """A dataset is already loaded with a different placement plan."""


class DatasetInUseError(DaemonError):
    """A dataset cannot be unloaded while jobs use it."""


class UnknownJobError(DaemonError):
    """A job id (or a rank of it) the daemon does not know."""


class InvalidReportError(DaemonError):
    """A progress report that is malformed (no reporter, figures of the wrong kind)."""


class DatasetTransferError(DaemonError):
    """A dataset stream from another node that cannot be kept: a wrong checksum or size, no room."""
