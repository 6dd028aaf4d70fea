"""The `graphtier` command's entry point: the read-only job queries answer without building the CLI.

Building the whole Typer application costs more than the query itself: every command module is
imported, and Typer makes a pydantic validator for each parameter it parses. `graphtier job status
ID` and `graphtier job list`, given at most `--json` and `--runtime-dir PATH`, run the functions
their Typer commands run (`job_report.show_status`, `show_list`: the same output and errors),
loading neither typer, pydantic nor the contract's models; any other arguments, bad ones and
`--help` included, go to the full application, whose parser then answers exactly as it always does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# The job commands the short path runs: name -> (what it runs in graphtier.launcher.cli.job_report,
# how many positional arguments it takes: the job id).
SHORT_PATH_COMMANDS = {"status": ("show_status", 1), "list": ("show_list", 0)}


def short_path_call(argv: list[str]) -> tuple[str, dict[str, Any]] | None:
    """(command name, keyword arguments of its function) when `argv` (after `graphtier`) is a job
    query the short path runs; None when the full parser must read it."""
    if len(argv) < 2 or argv[0] != "job" or argv[1] not in SHORT_PATH_COMMANDS:
        return None
    name, rest = argv[1], argv[2:]
    positional: list[str] = []
    kwargs: dict[str, Any] = {}
    i = 0
    while i < len(rest):
        arg = rest[i]
        if arg == "--json" and "json_out" not in kwargs:
            kwargs["json_out"] = True
        elif arg == "--runtime-dir" and "runtime_dir" not in kwargs and i + 1 < len(rest) and _plain(rest[i + 1]):
            kwargs["runtime_dir"] = Path(rest[i + 1])
            i += 1
        elif _plain(arg):
            positional.append(arg)
        else:  # --help, --watch, `--opt=value`, `--`, a repeated option, anything unusual
            return None
        i += 1
    if len(positional) != SHORT_PATH_COMMANDS[name][1]:
        return None
    if positional:
        kwargs["job_id"] = positional[0]
    return name, kwargs


def _plain(arg: str) -> bool:
    """An argument no parser could read as an option or a separator."""
    return bool(arg) and not arg.startswith("-")


def main() -> None:
    call = short_path_call(sys.argv[1:])
    if call is None:
        from graphtier.launcher.cli.app import main as full_cli

        full_cli()
        return
    from graphtier.launcher.cli import job_report
    from graphtier.launcher.cli.plain import stdout_closed_is_quiet

    name, kwargs = call
    with stdout_closed_is_quiet():
        getattr(job_report, SHORT_PATH_COMMANDS[name][0])(**kwargs)
