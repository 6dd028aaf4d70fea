"""Output for humans (rich) and machines (`--json`), and the CLI's error boundary.

`report_console` prints reports on stdout, `console` notes, progress and errors on stderr.
Every command but `job status` and `job list` (plain.py alone) imports this module, so it loads
no pydantic: a model is rendered by its `model_dump`, and a pydantic ValidationError can only
reach the boundary once pydantic is loaded. The plain-text pieces (exit statuses, JSON output,
sizes) live in plain.py and are re-exported here.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, NoReturn, TypeGuard

from rich import box
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.table import Table

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.cli.plain import (  # noqa: F401 (re-exported: every command takes them from here)
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_JOB_FAILED,
    EXIT_STATUSES,
    INTERRUPTED,
    _raise_interrupt,
    emit_json,
    exit_quietly_on_broken_pipe,
    exit_status,
    human_bytes,
    os_error_text,
    stdout_closed_is_quiet,
    terminal_width,
)

if TYPE_CHECKING:
    from pydantic import ValidationError


class _FittedConsole(Console):
    """rich's console laid out for `plain.terminal_width()`, read at every print: rich alone takes
    COLUMNS=0 for a width of 0 (a character a line) and a sizeless pty for 80."""

    @property
    def size(self) -> ConsoleDimensions:
        return ConsoleDimensions(terminal_width(), super().size.height)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size


# Reports (what a command was asked for: a table, a status) go to stdout, so they pipe into grep and
# redirect into files; notes, progress and errors go to stderr.
report_console = _FittedConsole()
console = _FittedConsole(stderr=True)


def _is_validation_error(exc: BaseException) -> TypeGuard[ValidationError]:
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


def _quiet_console_broken_pipe(self: Console) -> NoReturn:
    self.quiet = True
    exit_quietly_on_broken_pipe()


@contextmanager
def broken_pipe_is_quiet() -> Iterator[None]:
    """A closed stdout while the block runs, or at its last flush, exits EXIT_BROKEN_PIPE with no message.

    Rich's consoles (ours and the help's) would exit 1 instead: their documented hook is replaced.
    """
    Console.on_broken_pipe = _quiet_console_broken_pipe  # type: ignore[method-assign]  # rich's documented hook
    with stdout_closed_is_quiet():
        yield


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
    except OSError as exc:
        console.print(f"[bold red]error:[/] {escape(os_error_text(exc))}", highlight=False, soft_wrap=True)
        raise SystemExit(EXIT_FAILED) from None
    except KeyboardInterrupt:
        console.print(f"[yellow]{INTERRUPTED}[/]")
        raise SystemExit(EXIT_INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def step_observer() -> tuple[Callable[[str, str], None], Callable[[], None]]:
    """A progress display for pipeline steps: a spinner with elapsed time per running step."""
    from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console)
    tasks: dict[str, TaskID] = {}
    progress.start()

    def observe(name: str, state: str) -> None:
        if state == "start":
            tasks[name] = progress.add_task(name, total=1)
        else:
            progress.update(tasks[name], completed=1)

    return observe, progress.stop
