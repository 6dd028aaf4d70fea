"""Training checkpoints: atomic writes, newest-first discovery, bounded retention.

A checkpoint holds the model and optimizer state and where training stood (epoch, batches
done in that epoch, global step). It is written to a temporary file in the same directory,
flushed and fsynced, then renamed into place, so a rank killed mid-write leaves either the
previous checkpoint or the new one, never a torn file. Names carry the step
(`ckpt-000000120.pt`) so the newest is found by name alone.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.directory import checkpoint_file

FORMAT = 1
_NAME = re.compile(r"^ckpt-(\d{9})\.pt$")
FULL_BELOW_BYTES = 1 << 20  # a write that failed with less free than this failed for want of space


@dataclass(frozen=True)
class TrainPosition:
    """Where training stands: `batch` batches of `epoch` are done, `step` optimizer steps in all."""

    epoch: int = 0
    batch: int = 0
    step: int = 0


def list_checkpoints(directory: Path) -> list[Path]:
    """Checkpoints in `directory`, oldest first (empty when the directory does not exist)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(named.group(1)), p) for p in directory.iterdir() if (named := _NAME.match(p.name))]
    return [p for _, p in sorted(found, key=lambda step_and_path: step_and_path[0])]


def latest_checkpoint(directory: Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def save_checkpoint(
    directory: Path,
    position: TrainPosition,
    model_state: dict[str, Any],
    optimizer_state: dict[str, Any],
    *,
    extra: dict[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """Write a checkpoint atomically and keep only the newest `keep`; returns its path."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GraphtierError(f"{directory}: cannot create the checkpoint directory ({exc.strerror})") from exc
    target = checkpoint_file(directory, position.step)
    payload = {
        "format": FORMAT,
        "epoch": position.epoch,
        "batch": position.batch,
        "step": position.step,
        "model": model_state,
        "optimizer": optimizer_state,
        "extra": extra or {},
    }
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _write_failure(target, exc) from None
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except (OSError, RuntimeError) as exc:  # torch.save reports a full disk as RuntimeError ("enforce fail")
        Path(tmp).unlink(missing_ok=True)
        raise _write_failure(target, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    for old in list_checkpoints(directory)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return target


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def _write_failure(target: Path, exc: BaseException) -> GraphtierError:
    """The error of a checkpoint that could not be written, naming the file and, when the disk is full, the
    disk: torch's own message for it is `[enforce fail at inline_container.cc:...]`, which names neither."""
    directory = target.parent
    try:
        stats = os.statvfs(directory)
        free = stats.f_bavail * stats.f_frsize
    except OSError:
        free = None
    full = getattr(exc, "errno", None) == errno.ENOSPC or (free is not None and free < FULL_BELOW_BYTES)
    if full:
        return GraphtierError(
            f"cannot write checkpoint {target}: the disk holding it (the filesystem mounted at "
            f"{_mount_point(directory)}) is full ({free} bytes free); free space there and run the job again; "
            "nothing of this checkpoint was kept"
        )
    cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc).splitlines()[0][:300]
    return GraphtierError(f"cannot write checkpoint {target} ({cause}); nothing of this checkpoint was kept")


def remove_partial_writes(directory: Path) -> None:
    """Delete temporary files left by a writer that was killed mid-write."""
    directory = Path(directory)
    if directory.is_dir():
        for leftover in directory.glob(".ckpt-*.tmp"):
            leftover.unlink(missing_ok=True)


def load_checkpoint(path: Path) -> tuple[TrainPosition, dict[str, Any]]:
    """(position, payload) of a checkpoint; GraphtierError naming the file when it is unusable."""
    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt or foreign file
        raise GraphtierError(f"{path}: not a readable graphtier checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise GraphtierError(f"{path}: checkpoint format {got!r} is not the supported format {FORMAT}")
    missing = [k for k in ("epoch", "batch", "step", "model", "optimizer") if k not in payload]
    if missing:
        raise GraphtierError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return TrainPosition(int(payload["epoch"]), int(payload["batch"]), int(payload["step"])), payload
