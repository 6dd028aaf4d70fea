"""The CLI's help says what its authors wrote, and its shell completion works.

Typer renders help texts as rich markup, where "[synthetic]" is a style tag and vanishes; every
help text must therefore survive rendering (a literal bracket is written "\\[").  Completion is
exercised the way a shell does it: the script `--show-completion` prints and `--install-completion`
installs drives the program through `_GRAPHTIER_COMPLETE`, and the program answers with candidates.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer.main
from rich.text import Text

from graphtier.launcher.cli.app import app

GRAPHTIER = [sys.executable, "-m", "graphtier"]
SCRIPT = str(Path(sys.executable).parent / "graphtier")  # completion is for the installed command


def _commands(command: click.Command, path: str = "graphtier"):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def _help_texts() -> list[tuple[str, str]]:
    texts = []
    for path, command in _commands(typer.main.get_command(app)):
        texts += [(path, command.help or "")]
        texts += [(f"{path} {param.opts[0]}", getattr(param, "help", None) or "") for param in command.params]
    return texts


def test_every_help_text_renders_as_written():
    eaten = [(where, text) for where, text in _help_texts() if Text.from_markup(text).plain != text.replace("\\[", "[")]
    assert not eaten, f"rich markup changes these help texts (write a literal '[' as '\\\\['): {eaten}"


def test_bracketed_notes_reach_the_terminal():
    shown = subprocess.run(
        [*GRAPHTIER, "dataset", "prepare", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    # the help panel wraps its texts inside a box: read them as one line of words
    words = " ".join(shown.stdout.replace("│", " ").split())
    assert "[synthetic] log2 of the node count" in words
    assert "noted. [synthetic] planted" in words
    assert "[edges] node feature file" in words


def _complete(words: str, env: dict[str, str]) -> list[str]:
    """What the bash completion script gets back for the command line `words` (cursor at its end)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    env = {**env, "_GRAPHTIER_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    done = subprocess.run([SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def _from_bash(argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `argv` as heterogeneous in bash: typer finds the shell to complete for among its parents (a second
    command keeps bash from exec-ing the first in its own place)."""
    return subprocess.run(["bash", "-c", f"{argv}; exit $?"], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_shell_completion_is_shown_installed_and_answers(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "SHELL": "/bin/bash"}
    shown = _from_bash(f"{SCRIPT} --show-completion", env)
    assert shown.returncode == 0, shown.stderr
    assert "_GRAPHTIER_COMPLETE=complete_bash" in shown.stdout and "-F _graphtier_completion graphtier" in shown.stdout

    installed = _from_bash(f"{SCRIPT} --install-completion", env)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "_GRAPHTIER_COMPLETE" in "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())

    assert "dataset" in _complete("graphtier da", env)
    assert set(_complete("graphtier job ", env)) >= {"submit", "status", "cancel"}
    assert "--runtime-dir" in _complete("graphtier job status --run", env)


@pytest.mark.long  # over 20 s on 2 cores (a process per command): CI's second step
def test_every_help_reads_at_80_columns():
    # Each command's --help at 80 columns: no flag shows a `<bool>` metavar (a flag takes no value),
    # nothing is cut with an ellipsis, and every help text has at least 32 columns: it starts right
    # after the longest option name and its type, not folded into a column of a few words beside a
    # second column of `--no-...` names. graphtierd's help too.
    commands = [path.split()[1:] for path, _ in _commands(typer.main.get_command(app))]
    env = {**os.environ, "COLUMNS": "80"}
    helps = {" ".join(["graphtier", *args]): [*GRAPHTIER, *args, "--help"] for args in commands}
    helps["graphtierd"] = [sys.executable, "-m", "graphtier.service.daemon", "--help"]
    for name, argv in helps.items():
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, (name, done.stderr)
        lines = done.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, name
        assert "<bool>" not in done.stdout and "…" not in done.stdout, (name, done.stdout)
        for line in lines:
            # an option row: "│ --flag  <type>  help ...│", the help starting where its column does
            if line.startswith("│") and " --" in line[:8]:
                inner = line.strip("│ ").split("  ")
                text_at = line.index(inner[-1].strip()) if inner[-1].strip() else 0
                assert len(line) - 2 - text_at >= 32, f"{name}: help text starts at column {text_at}:\n{line}"
