"""The errors graphtier raises for bad input, each naming what is wrong and where.

Every message says the cause, and where it helps the fix. They derive from `GraphtierError`,
so the CLI turns them into one clear line and a non-zero exit instead of a traceback; the
daemon's gRPC servicers map each to its status code (`rpc/grpc_status.py`). The data plane's
errors come first, then the daemon's and its clients'.
"""

from __future__ import annotations

from pathlib import Path


class GraphtierError(Exception):
    """Base class of every error graphtier reports to a user."""


class DatasetSourceError(GraphtierError):
    """A raw dataset file is missing, malformed or inconsistent with its siblings.

    Args:
        path: The file at fault; None when the problem is not one file's.
        problem: What is wrong, with the line or field where it helps.
        fix: How to fix it, when there is something to say.

    Attributes:
        path (str | None): The file at fault.
        problem (str): What is wrong.
        fix (str | None): How to fix it.
    """

    def __init__(self, path: str | Path | None, problem: str, *, fix: str | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        self.fix = fix
        where = f"{self.path}: " if self.path else ""
        tail = f" ({fix})" if fix else ""
        super().__init__(f"{where}{problem}{tail}")


class PreparedDatasetError(GraphtierError):
    """A prepared dataset is missing, already exists, or fails its checksums."""


class PlacementError(GraphtierError):
    """Tier budgets that cannot be turned into a placement for this dataset."""


class SamplingError(GraphtierError):
    """Seeds or fanouts a sampler cannot work with."""


class SharedMemoryError(GraphtierError):
    """A shared-memory segment cannot be created, attached or reclaimed."""


class DaemonError(GraphtierError):
    """Base class of the daemon's errors."""


class DaemonConfigError(DaemonError):
    """A daemon config file or flag that cannot be used."""


class DaemonAlreadyRunningError(DaemonError):
    """Another daemon holds the runtime directory's lock."""


class DaemonNotRunningError(DaemonError):
    """No daemon answers at the runtime directory or address a client was given."""


class DaemonNotAnsweringError(DaemonError):
    """A daemon runs at the runtime directory but does not answer: stopped (SIGSTOP, a debugger) or hung."""


class DaemonRequestError(DaemonError):
    """The daemon refused or failed a request.

    Args:
        code: The gRPC status code's name, such as `INVALID_ARGUMENT` or `NOT_FOUND`.
        message: The daemon's own message.

    Attributes:
        code (str): The gRPC status code's name.
        message (str): The daemon's own message.
    """

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


class UnauthenticatedError(DaemonError):
    """A call whose caller the daemon cannot tell: no session credential (or an expired one) where a
    user must be known, or a TCP call without a token the daemon knows (UNAUTHENTICATED)."""


class PermissionDeniedError(DaemonError):
    """A known caller asking for what is not theirs: another user's job, or an operator's action
    (PERMISSION_DENIED; the message names the owner and who may)."""


class InvalidReportError(DaemonError):
    """A progress report that is malformed (no reporter, figures of the wrong kind)."""


class DatasetTransferError(DaemonError):
    """A dataset stream from another node that cannot be kept: a wrong checksum or size, no room."""


class ReplyTooLargeError(DaemonError):
    """A FetchRows call asks for more than MAX_FETCH_ROWS rows or MAX_FETCH_BYTES bytes (RESOURCE_EXHAUSTED)."""
