"""Shared-memory test fixtures: mappings of a process, and child processes (the leak check is tests/conftest.py's)."""

from __future__ import annotations

import multiprocessing
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection

import pytest


def mappings_of(path: str, pid: int | str = "self") -> list[tuple[int, str]]:
    """(start address, permissions) of every mapping of `path` in process `pid`."""
    found = []
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip().removesuffix(" (deleted)") == path:
                found.append((int(parts[0].split("-")[0], 16), parts[1]))
    return found


@pytest.fixture
def mappings() -> Callable[..., list[tuple[int, str]]]:
    """`mappings(path)`: where this process has `path` mapped, and how (e.g. 'r--s', 'rw-s')."""
    return mappings_of


class Children:
    """Child processes for a test: fresh interpreters (`start`, slow: they import torch) or forks (`fork`)."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen] = []
        self.forked: list[multiprocessing.Process] = []

    def fork(self, target: Callable[..., None], *args: object) -> tuple[multiprocessing.Process, Connection]:
        """Run `target(conn, *args)` in a forked child; return the child and this end of the pipe."""
        here, there = multiprocessing.get_context("fork").Pipe()
        proc = multiprocessing.get_context("fork").Process(target=target, args=(there, *args), daemon=True)
        proc.start()
        there.close()
        self.forked.append(proc)
        return proc, here

    def start(self, script: str) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.started.append(proc)
        return proc

    @staticmethod
    def line(proc: subprocess.Popen) -> str:
        """The child's next stdout line; fails with its stderr if it died instead."""
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=30)
            raise AssertionError(f"child exited with {proc.returncode}: {proc.stderr.read()}")
        return line.strip()

    @staticmethod
    def send(proc: subprocess.Popen, text: str = "go") -> None:
        proc.stdin.write(text + "\n")
        proc.stdin.flush()


@pytest.fixture
def children() -> Iterator[Children]:
    """Child processes for a test; leftovers get SIGTERM (so their owners clean up) at teardown."""
    kids = Children()
    yield kids
    for proc in kids.started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    for proc in kids.forked:
        if proc.is_alive():
            proc.terminate()
        proc.join(timeout=30)
