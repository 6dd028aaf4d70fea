"""`graphtierd --help` shows every option, each with DaemonConfig's description of its field as written,
in the panels the `graphtier` commands use; a usage error names the bad flag and exits 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rich.text import Text

from graphtier.contract.command_line import model_options
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.main import command_line

GRAPHTIERD = str(Path(sys.executable).parent / "graphtierd")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "1000"}  # wide enough that no help text wraps
    return subprocess.run([GRAPHTIERD, *argv], capture_output=True, text=True, env=env, timeout=60)


def test_help_lists_every_option_as_written_in_its_section():
    shown = _run("--help")
    assert shown.returncode == 0, shown.stderr
    assert "Usage: graphtierd [OPTIONS]" in shown.stdout and "╭─ Options" in shown.stdout
    lines = shown.stdout.splitlines()
    params = [param for param in command_line().params if param.name != "help"]
    assert {"--config", "--print-files", "--runtime-dir", "--peer", "--host-budget"} - {
        opt for param in params for opt in param.opts
    } == {"--host-budget"}  # the daemon's flags, not a job's
    for param in params:
        flag, text = param.opts[0], Text.from_markup(param.help).plain
        assert [line for line in lines if flag in line and text in line], f"{flag}: {text!r} not shown as written"
    sections = {option.section for option in model_options(DaemonConfig)}
    assert sections == {"Files", "Serving", "Access", "Datasets", "Jobs", "GPU", "Cluster"}
    assert all(f"╭─ {section} " in shown.stdout for section in sections)
    assert "<bool>" not in shown.stdout  # a flag takes no value


def test_a_usage_error_names_the_flag_and_exits_2():
    refused = _run("--no-such-flag")
    assert refused.returncode == 2 and refused.stdout == ""
    assert "Try 'graphtierd --help' for help." in refused.stderr
    assert "╭─ Error" in refused.stderr and "--no-such-flag" in refused.stderr
    refused = _run("--gpu-tiers", "sometimes")
    assert refused.returncode == 2 and "gpu_tiers: Input should be 'auto' or 'off' (got 'sometimes')" in refused.stderr
    refused = _run("--http-port", "eighty")
    assert (
        refused.returncode == 2 and "Invalid value for '--http-port'" in refused.stderr and "integer" in refused.stderr
    )
