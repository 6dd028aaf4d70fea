"""gRPC status codes for the daemon's errors, and the decorator servicer methods wear.

A servicer method raises domain errors; `grpc_method` turns each into the status code the
contract names for it, with the error's message (which names the offending value). Any
other exception is a bug: it is logged with its traceback and answered INTERNAL.
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from pydantic import ValidationError

from graphtier.contract.errors import (
    DaemonError,
    DatasetConflictError,
    DatasetInUseError,
    DatasetTransferError,
    GraphtierError,
    InvalidReportError,
    InvalidRequestError,
    PermissionDeniedError,
    PlacementError,
    PreparedDatasetError,
    ReplyTooLargeError,
    SharedMemoryError,
    UnauthenticatedError,
    UnknownDatasetError,
    UnknownJobError,
)
from graphtier.contract.messages import describe_validation_error, shorten

log = logging.getLogger("graphtierd")

# Most specific first: the first class the error is an instance of decides.
_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (UnknownDatasetError, grpc.StatusCode.NOT_FOUND),
    (DatasetTransferError, grpc.StatusCode.DATA_LOSS),
    (UnknownJobError, grpc.StatusCode.NOT_FOUND),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (DatasetConflictError, grpc.StatusCode.ALREADY_EXISTS),
    (DatasetInUseError, grpc.StatusCode.FAILED_PRECONDITION),
    (InvalidReportError, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidRequestError, grpc.StatusCode.INVALID_ARGUMENT),
    (PlacementError, grpc.StatusCode.INVALID_ARGUMENT),
    (ValidationError, grpc.StatusCode.INVALID_ARGUMENT),
    (SharedMemoryError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ReplyTooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (PreparedDatasetError, grpc.StatusCode.FAILED_PRECONDITION),
    (DaemonError, grpc.StatusCode.FAILED_PRECONDITION),
    (GraphtierError, grpc.StatusCode.INVALID_ARGUMENT),
)


def status_code_for(error: BaseException) -> grpc.StatusCode:
    """The status code the contract gives `error` (INTERNAL for anything unexpected)."""
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


MESSAGE_LIMIT = 600  # characters of an error message logged and echoed; callers choose the values in it


def _message(error: BaseException) -> str:
    if isinstance(error, ValidationError):
        return shorten(describe_validation_error(error, whole="request", input_limit=120), MESSAGE_LIMIT)
    return shorten(str(error), MESSAGE_LIMIT)


Method = TypeVar("Method", bound=Callable[..., Any])


def grpc_method(method: Method) -> Method:
    """Wrap a servicer method `(self, request, context)`: domain errors become their status codes."""

    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except (GraphtierError, ValidationError) as error:
            code = status_code_for(error)
            log.info("%s: %s %s", method.__name__, code.name, _message(error))
            context.abort(code, _message(error))
        except Exception as error:  # a bug: keep serving, say so, keep the traceback in the log
            trace = "".join(shorten(line, 2000) for line in traceback.format_exception(error))
            log.error("%s failed:\n%s", method.__name__, trace)
            context.abort(
                grpc.StatusCode.INTERNAL,
                shorten(f"{method.__name__} failed inside the daemon: {error!r}", MESSAGE_LIMIT),
            )

    return wrapper  # type: ignore[return-value]  # functools.wraps: called as `method` is, (self, request, context)
