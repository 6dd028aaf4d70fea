"""`graphtier job status` and `job list` skip building the Typer application (launcher/cli/entry.py):
the short path must read its arguments exactly as the Typer command does, and hand every other
form, bad ones included, to the full parser."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import typer.main

from graphtier.launcher.cli import job, job_report
from graphtier.launcher.cli.entry import SHORT_PATH_COMMANDS, short_path_call

READ_BY_THE_SHORT_PATH = [
    ["job", "status", "7"],
    ["job", "status", "7", "--json"],
    ["job", "status", "--json", "7"],
    ["job", "status", "7", "--runtime-dir", "/tmp/run"],
    ["job", "status", "--runtime-dir", "relative/run", "--json", "a-b"],
    ["job", "list"],
    ["job", "list", "--json"],
    ["job", "list", "--runtime-dir", "run", "--json"],
]

LEFT_TO_THE_FULL_PARSER = [
    [],
    ["job"],
    ["job", "status"],  # missing argument
    ["job", "status", ""],
    ["job", "status", "7", "8"],  # extra argument
    ["job", "status", "7", "--watch"],
    ["job", "status", "--help"],
    ["job", "status", "7", "--runtime-dir"],  # option without its value
    ["job", "status", "7", "--runtime-dir=/tmp/run"],
    ["job", "status", "7", "--runtime-dir", "--json"],
    ["job", "status", "7", "--runtime-dir", "a", "--runtime-dir", "b"],
    ["job", "status", "7", "--json", "--json"],
    ["job", "status", "--", "-7"],
    ["job", "status", "7", "--no-such-flag"],
    ["job", "list", "7"],
    ["job", "list", "-h"],
    ["job", "logs", "7"],
    ["metrics"],
    ["--version"],
]


def _typer_params(argv: list[str]) -> dict[str, object]:
    """What the Typer command parses `argv` (`job NAME ...`) into."""
    group = typer.main.get_command(job.app)
    command = group.commands[argv[1]]
    with command.make_context(argv[1], list(argv[2:])) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize("argv", READ_BY_THE_SHORT_PATH, ids=" ".join)
def test_the_short_path_reads_arguments_as_typer_does(argv):
    call = short_path_call(argv)
    assert call is not None
    name, kwargs = call
    function = getattr(job_report, SHORT_PATH_COMMANDS[name][0])
    defaults = {p.name: p.default for p in inspect.signature(function).parameters.values() if p.default is not p.empty}
    parsed, taken = _typer_params(argv), inspect.signature(function).parameters
    assert {**defaults, **kwargs} == {k: v for k, v in parsed.items() if k in taken}
    assert {k: v for k, v in parsed.items() if k not in taken} in ({}, {"watch": False})  # only --watch is not run
    assert all(isinstance(v, Path) for k, v in kwargs.items() if k == "runtime_dir")


@pytest.mark.parametrize("argv", LEFT_TO_THE_FULL_PARSER, ids=lambda a: " ".join(a) or "(none)")
def test_other_arguments_go_to_the_full_parser(argv):
    assert short_path_call(argv) is None
