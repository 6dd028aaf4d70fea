"""Output for humans (rich) and machines (`--json`), and the CLI's error boundary."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel, ValidationError
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphtier.contract.errors import GraphtierError
from graphtier.contract.messages import describe_validation_error

console = Console(stderr=True)
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def emit_json(payload: Any) -> None:
    """Print one JSON document on stdout."""
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    elif isinstance(payload, list):
        payload = [p.model_dump(mode="json") if isinstance(p, BaseModel) else p for p in payload]
    sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")


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


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def error_boundary() -> Iterator[None]:
    """Turn graphtier errors into one clear line and a non-zero exit; SIGTERM unwinds like Ctrl-C.

    Unwinding (instead of dying on the signal) lets every `with` block clean up: the
    dataset writer removes its temporary directory, shared-memory owners unlink segments.
    """
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    except GraphtierError as exc:
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except ValidationError as exc:
        problems = describe_validation_error(exc, whole="value")
        console.print(f"[bold red]error:[/] invalid {escape(exc.title)}: {escape(problems)}", highlight=False)
        raise SystemExit(EXIT_BAD_INPUT) from None
    except OSError as exc:  # a full disk, a read-only file system, no permission: the path and the cause
        where = f"{exc.filename}: " if exc.filename else ""
        console.print(
            f"[bold red]error:[/] {escape(where + (exc.strerror or str(exc)))}", highlight=False, soft_wrap=True
        )
        raise SystemExit(EXIT_BAD_INPUT) from None
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
