"""The CLI's plain-text side: exit statuses, errors as one line, reports and JSON on stdout, sizes for people.

Nothing here loads rich, typer or pydantic: `graphtier job status` and `job list` (see
`entry.py`) print through this module alone. `rendering.py` re-exports these names and adds
rich's tables and progress displays for every other command.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from graphtier.contract.errors import (
    DaemonConfigError,
    DaemonError,
    DaemonRequestError,
    GraphtierError,
    InvalidReportError,
    InvalidRequestError,
    SharedMemoryError,
)

# The exit statuses of every `graphtier` command (EXIT_STATUSES below is what `--help` and the docs say).
EXIT_FAILED = 1  # a well-formed command could not be carried out: no daemon, an unknown job, an I/O error
EXIT_BAD_INPUT = 2  # a usage error, or an input the command names refused as invalid: fix the command
EXIT_JOB_FAILED = 3  # the job waited for (`--wait`, `demo`) ended failed or cancelled
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM, after cleaning up (128 + SIGINT)
EXIT_BROKEN_PIPE = 141  # the reader of the output went away (`| head`), quietly, as other CLIs exit (128 + SIGPIPE)
EXIT_STATUSES = (
    "Exit status: 0 done; 1 failed (no daemon, unknown job, I/O error); "
    "2 usage error or invalid input; 3 the job waited for failed; 130 interrupted; "
    "141 output closed early (a pipe into head)."
)

# Daemon errors that say the request was wrong rather than that serving it failed; the gRPC codes that say so.
_INPUT_ERRORS: tuple[type[DaemonError], ...] = (DaemonConfigError, InvalidRequestError, InvalidReportError)
_INPUT_CODES = frozenset({"INVALID_ARGUMENT", "OUT_OF_RANGE"})


def exit_status(error: GraphtierError) -> int:
    """EXIT_FAILED for an error in carrying a command out (the daemon's answers, shared memory),
    EXIT_BAD_INPUT for one in what the user gave (a source, a name, a budget, a flag's value)."""
    if isinstance(error, _INPUT_ERRORS):
        return EXIT_BAD_INPUT
    if isinstance(error, DaemonRequestError):
        return EXIT_BAD_INPUT if error.code in _INPUT_CODES else EXIT_FAILED
    if isinstance(error, DaemonError | SharedMemoryError):
        return EXIT_FAILED
    return EXIT_BAD_INPUT


def exit_quietly_on_broken_pipe() -> NoReturn:
    """Leave with EXIT_BROKEN_PIPE and no message once stdout's reader is gone; stdout is pointed at
    /dev/null first so the interpreter's last flush cannot print a second error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise SystemExit(EXIT_BROKEN_PIPE)


def emit_json(payload: Any) -> None:
    """Print one JSON document on stdout."""
    if _is_model(payload):
        payload = payload.model_dump(mode="json")
    elif isinstance(payload, list):
        payload = [p.model_dump(mode="json") if _is_model(p) else p for p in payload]
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")


def _is_model(value: Any) -> bool:
    """A pydantic model, checked without importing pydantic (none exists unless it was imported)."""
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(value, pydantic.BaseModel)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


@contextmanager
def stdout_closed_is_quiet() -> Iterator[None]:
    """A closed stdout while the block runs, or at its last flush, exits EXIT_BROKEN_PIPE with no message."""
    try:
        yield
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            exit_quietly_on_broken_pipe()


MIN_WIDTH = 20  # narrower than this nothing reads anyway: text is laid out for 20 columns and the terminal wraps it


def columns_given() -> int | None:
    """$COLUMNS when it is a positive number (COLUMNS=0, as some shells leave it, says nothing)."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def terminal_width() -> int:
    """Columns to lay text out in: $COLUMNS when it is a positive number, else the size of the first
    of stdin, stdout and stderr that is a terminal with a size (a pty made without one, as CI runners
    and `docker exec -t` make, says 0 columns), else 80; never below MIN_WIDTH."""
    columns = columns_given()
    if columns is not None:
        return max(columns, MIN_WIDTH)
    for descriptor in (0, 1, 2):
        try:
            found = os.get_terminal_size(descriptor).columns
        except OSError:
            continue
        if found > 0:
            return max(found, MIN_WIDTH)
    return 80


def print_report(text: str) -> None:
    """A report (what the command was asked for) on stdout. On a terminal, or wherever $COLUMNS asks
    for a width, a line wider than that, one long word after its indent (a path), is folded at it, as
    rich prints; into a pipe or a file every line is written whole, so `grep` finds it."""
    lines = text.splitlines() or [""]
    if sys.stdout.isatty() or columns_given() is not None:
        width = terminal_width()
        lines = [line[i : i + width] for line in lines for i in range(0, max(len(line), 1), width)]
    sys.stdout.write("\n".join(lines) + "\n")


def print_error(text: str) -> None:
    """`error: TEXT` on stderr, as one line whatever the terminal's width."""
    sys.stderr.write(f"error: {text}\n")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


INTERRUPTED = "interrupted; nothing was left half-written"


@contextmanager
def plain_errors() -> Iterator[None]:
    """`rendering.error_boundary` in plain text, for commands that load no pydantic (so raise no
    ValidationError): graphtier errors and OS errors as one line with their exit status, SIGTERM
    unwinds like Ctrl-C, a closed stdout ends the command quietly."""
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    except GraphtierError as exc:
        print_error(str(exc))
        raise SystemExit(exit_status(exc)) from None
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    except OSError as exc:
        print_error(os_error_text(exc))
        raise SystemExit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED + "\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def os_error_text(exc: OSError) -> str:
    """A full disk, a read-only file system, no permission: the path and the cause."""
    where = f"{exc.filename}: " if exc.filename else ""
    return where + (exc.strerror or str(exc))


def runtime_directory(runtime_dir: Path | None) -> Path | None:
    """`--runtime-dir` made absolute (the daemon may resolve it from another working directory);
    None keeps the client's default lookup."""
    return Path(os.path.abspath(runtime_dir)) if runtime_dir else None
