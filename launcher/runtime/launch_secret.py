"""The secret the ranks of one launch on one node share, so that they, and nobody who merely guesses
the launch's id, find the job the first of them registered.

A launch's id (torchrun's run id, master address and agent pid; a lone process's pid) is visible to
everyone in `ps`. The daemon finds a launch's job by this secret instead: 256 random bits, made by
the first rank of the launch on the node and read by the others from a file only this user can
read -- `<dir>/<digest of the launch id and the agent's start time>` in a directory of this user
alone (0700): `$XDG_RUNTIME_DIR/graphtier-launches`, else `<tmp>/graphtier-launches-<uid>`. The
first rank writes it completely before linking it into place, so a rank never reads half a secret.
The node's first local rank removes the file when it ends cleanly; a failed launch's file (torchrun
may restart its ranks, which rejoin with it) is removed by the next launch's first look once the
launcher's agent has exited. A process no
launcher started (`python train.py`) is a launch of its own: its secret never leaves it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from graphtier.contract.errors import GraphtierError
from graphtier.service.shm.naming import process_start_time

SECRET_BYTES = 32


def launches_dir() -> Path:
    """This user's private directory of launch secrets, made if missing; GraphtierError naming it when it
    exists but is not this user's alone (another user made it first, or it is a link)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = Path(runtime) / "graphtier-launches" if runtime and Path(runtime).is_dir() else None
    if base is None:
        base = Path(tempfile.gettempdir()) / f"graphtier-launches-{os.getuid()}"
    with contextlib.suppress(FileExistsError):
        base.mkdir(mode=0o700)
    info = base.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise GraphtierError(
            f"{base} is not a directory of uid {os.getuid()} alone (mode {stat.S_IMODE(info.st_mode):o}, owner uid "
            f"{info.st_uid}); the ranks of a launch keep their shared secret there: remove it, or set "
            "XDG_RUNTIME_DIR to a private directory"
        )
    return base


def launch_secret(launch_id: str, agent_pid: int, *, alone: bool) -> str:
    """The secret of launch `launch_id` (whose launcher's agent is `agent_pid`) on this node; `alone`: a
    process no launcher started, whose secret is its own."""
    if alone:
        return secrets.token_hex(SECRET_BYTES)
    directory = launches_dir()
    _remove_ended(directory)
    path = _secret_path(directory, launch_id, agent_pid)
    key = path.name
    secret = secrets.token_hex(SECRET_BYTES)
    scratch = directory / f".{key}.{os.getpid()}"
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, f"{secret} {agent_pid} {process_start_time(agent_pid)}\n".encode())
    finally:
        os.close(fd)
    try:
        os.link(scratch, path)  # fails if another rank of the launch was first: then its secret holds
    except FileExistsError:
        pass
    finally:
        scratch.unlink()
    written = path.read_text().split()
    if not written or len(written[0]) != 2 * SECRET_BYTES:
        raise GraphtierError(f"{path}: not a launch secret; remove it")
    return written[0]


def discard_launch_secret(launch_id: str, agent_pid: int) -> None:
    """Remove the launch's secret file: its ranks on this node are done (the node's first local rank,
    after a clean end, calls it; a failed launch's file waits for the next launch, for ranks restarted
    by torchrun rejoin with it)."""
    with contextlib.suppress(OSError, GraphtierError):
        _secret_path(launches_dir(), launch_id, agent_pid).unlink()


def _secret_path(directory: Path, launch_id: str, agent_pid: int) -> Path:
    key = f"{launch_id}\0{agent_pid}\0{process_start_time(agent_pid)}"
    return directory / hashlib.sha256(key.encode()).hexdigest()[:40]


def _remove_ended(directory: Path) -> None:
    """Remove the secrets of launches whose agent has exited (its pid gone, or reused since), and what a
    rank killed while writing one left."""
    for entry in directory.iterdir():
        with contextlib.suppress(OSError, ValueError):
            if entry.name.startswith("."):  # .<key>.<pid of the rank writing it>
                if process_start_time(int(entry.name.rsplit(".", 1)[1])) is None:
                    entry.unlink()
                continue
            _secret, pid, start = entry.read_text().split()
            if str(process_start_time(int(pid))) != start:
                entry.unlink()
