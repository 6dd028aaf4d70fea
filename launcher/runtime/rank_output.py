"""A rank's stdout and stderr as whole lines, each prefixed `[rank N] `, one write per line.

Every rank of a job (and torchrun) writes into the same job log. Python's print() issues the
text and its newline as two writes when output is unbuffered, so two ranks printing at once
glue lines together (`...0.5140[rank 1] eval ...`). `RankStream` keeps a partial line until
its newline arrives and writes complete lines with one `os.write`, prefixed so the daemon
attributes every line -- the runtime's, the user's script's, and tracebacks -- to its rank.
"""

from __future__ import annotations

import atexit
import io
import os
import sys
import threading


class RankStream(io.TextIOBase):
    """A text stream writing `prefix + line + "\\n"` to file descriptor `fd`, line by line."""

    def __init__(self, fd: int, prefix: str) -> None:
        super().__init__()
        self._fd, self._prefix = fd, prefix
        self._partial = ""
        self._lock = threading.Lock()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # read-only: typeshed has an attribute
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]  # read-only: typeshed has an attribute
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._fd

    def _emit(self, lines: list[str]) -> None:
        data = "".join(f"{self._prefix}{line}\n" for line in lines).encode("utf-8", "replace")
        while data:
            try:
                written = os.write(self._fd, data)
            except OSError:
                return  # the log is gone; nothing better to do with output
            data = data[written:]

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text.replace("\r\n", "\n")).split("\n")
            if lines:
                self._emit(lines)
        return len(text)

    def flush(self) -> None:
        """Complete lines are written at once; a partial line waits for its newline (or `close`)."""

    def close(self) -> None:
        """Write a pending partial line; the stream stays usable (it is the process's stdout)."""
        with self._lock:
            if self._partial:
                self._emit([self._partial])
                self._partial = ""


def install_rank_output(rank: int) -> None:
    """Replace sys.stdout and sys.stderr of this process by `[rank N] `-prefixed line streams."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        if old is not None:
            try:
                old.flush()
            except (OSError, ValueError):
                pass
        stream = RankStream(fd, f"[rank {rank}] ")
        setattr(sys, name, stream)
        atexit.register(stream.close)
