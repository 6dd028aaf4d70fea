"""Output for humans (rich) and machines (`--json`), and the CLI's error boundary.

Every command imports this module, so it loads no pydantic: a model is rendered by its
`model_dump`, and a pydantic ValidationError can only reach the boundary once pydantic is loaded.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphtier.contract.errors import (
    DaemonConfigError,
    DaemonError,
    DaemonRequestError,
    GraphtierError,
    InvalidReportError,
    InvalidRequestError,
    SharedMemoryError,
)

console = Console(stderr=True)

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


def _is_validation_error(exc: BaseException) -> bool:
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(exc, pydantic.ValidationError)


def compact_table(*columns: str, title: str | None = None) -> Table:
    """A table that fits 80 columns where a boxed one would cut its cells (`sta…`): a rule under
    the header and one space between columns instead of borders."""
    return Table(
        *columns,
        title=title,
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_edge=False,
        collapse_padding=True,
    )


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} TiB"


def _quiet_console_broken_pipe(self: Console) -> NoReturn:
    self.quiet = True
    exit_quietly_on_broken_pipe()


@contextmanager
def broken_pipe_is_quiet() -> Iterator[None]:
    """A closed stdout while the block runs, or at its last flush, exits EXIT_BROKEN_PIPE with no message.

    Rich's consoles (ours and the help's) would exit 1 instead: their documented hook is replaced.
    """
    Console.on_broken_pipe = _quiet_console_broken_pipe  # type: ignore[method-assign]
    try:
        yield
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    finally:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            exit_quietly_on_broken_pipe()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def error_boundary() -> Iterator[None]:
    """Turn graphtier errors into one clear line and an exit status (see EXIT_STATUSES); SIGTERM unwinds
    like Ctrl-C; a closed stdout (`| head`) ends the command quietly.

    Unwinding (instead of dying on the signal) lets every `with` block clean up: the
    dataset writer removes its temporary directory, shared-memory owners unlink segments.
    """
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    except GraphtierError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise SystemExit(exit_status(exc)) from None
    except ValueError as exc:  # pydantic's ValidationError is one; any other goes on up
        if not _is_validation_error(exc):
            raise
        from graphtier.contract.messages import describe_validation_error

        problems = describe_validation_error(exc, whole="value")
        console.print(f"[bold red]error:[/] invalid {escape(exc.title)}: {escape(problems)}", highlight=False)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except BrokenPipeError:
        exit_quietly_on_broken_pipe()
    except OSError as exc:  # a full disk, a read-only file system, no permission: the path and the cause
        where = f"{exc.filename}: " if exc.filename else ""
        console.print(
            f"[bold red]error:[/] {escape(where + (exc.strerror or str(exc)))}", highlight=False, soft_wrap=True
        )
        raise SystemExit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; nothing was left half-written[/]")
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def step_observer() -> tuple[Callable[[str, str], None], Callable[[], None]]:
    """A progress display for pipeline steps: a spinner with elapsed time per running step."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console)
    tasks: dict[str, int] = {}
    progress.start()

    def observe(name: str, state: str) -> None:
        if state == "start":
            tasks[name] = progress.add_task(name, total=1)
        else:
            progress.update(tasks[name], completed=1)

    return observe, progress.stop
