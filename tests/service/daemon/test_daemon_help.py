"""`graphtierd --help` shows every option the parser has, with its help as written, in the panels
the `graphtier` commands use; a usage error names the bad flag and exits 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from graphtier.service.daemon.main import build_parser

GRAPHTIERD = str(Path(sys.executable).parent / "graphtierd")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "1000"}  # wide enough that no help text wraps
    return subprocess.run([GRAPHTIERD, *argv], capture_output=True, text=True, env=env, timeout=60)


def test_help_lists_every_option_as_written_in_the_cli_style():
    shown = _run("--help")
    assert shown.returncode == 0, shown.stderr
    assert "Usage: graphtierd [OPTIONS]" in shown.stdout and "╭─ Options" in shown.stdout
    lines = shown.stdout.splitlines()
    for action in build_parser()._actions:
        if action.dest == "help":
            continue
        flags = ", ".join(action.option_strings)
        text = action.help.replace("%%", "%")
        assert [line for line in lines if flags in line and text in line], f"{flags}: {text!r} not shown as written"


def test_a_usage_error_names_the_flag_and_exits_2():
    refused = _run("--no-such-flag")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "Try 'graphtierd --help' for help." in refused.stderr
    assert "╭─ Error" in refused.stderr and "--no-such-flag" in refused.stderr
    refused = _run("--gpu-tiers", "sometimes")
    assert refused.returncode == 2 and "sometimes" in refused.stderr
