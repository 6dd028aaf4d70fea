"""Where prepared datasets live, and the atomic writer that puts one there.

A dataset is a directory `<root>/<name>/` holding `manifest.json` and its `.npy` arrays.
It is written into a hidden sibling `.tmp-<name>-<pid>-<token>/` and renamed into place
only when complete, so a crash or Ctrl-C never leaves a half-written dataset under its
name; the next writer removes temporaries whose writer process is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import psutil
from pydantic import ValidationError

from graphtier.contract.endpoints import default_dataset_root
from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared.manifest import FORMAT_VERSION, MANIFEST_FILE, ArrayInfo, DatasetManifest
from graphtier.service.prepared.npy_io import NpyStreamWriter, write_npy, write_npy_rows

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TMP_PATTERN = re.compile(r"^\.(tmp|trash)-(?P<name>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")


def validate_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise PreparedDatasetError(
            f"invalid dataset name {name!r}: use 1-64 characters from letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reclaim_stale_temporaries(root: Path) -> list[Path]:
    """Remove `.tmp-*`/`.trash-*` directories whose writer process no longer exists."""
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        match = _TMP_PATTERN.match(entry.name)
        if match and entry.is_dir() and not psutil.pid_exists(int(match["pid"])):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def read_manifest(directory: Path) -> DatasetManifest:
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise PreparedDatasetError(f"{path}: no manifest; {directory} is not a prepared dataset")
    try:
        manifest = DatasetManifest.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise PreparedDatasetError(f"{path}: malformed manifest: {exc}") from exc
    if manifest.format_version != FORMAT_VERSION:
        raise PreparedDatasetError(
            f"{path}: format version {manifest.format_version} is not supported by this graphtier "
            f"(it reads version {FORMAT_VERSION}); prepare the dataset again"
        )
    return manifest


class DatasetWriter:
    """Writes one prepared dataset atomically: use as a context manager, then `commit`."""

    def __init__(self, root: Path, name: str, *, overwrite: bool = False) -> None:
        self.root = Path(root)
        self.name = validate_name(name)
        self.final = self.root / name
        self.overwrite = overwrite
        self.arrays: dict[str, ArrayInfo] = {}
        self.tmp: Path | None = None
        self.check_target()

    def check_target(self) -> None:
        if self.final.exists() and not self.overwrite:
            raise PreparedDatasetError(
                f"dataset {self.name!r} already exists at {self.final}; pass --overwrite to replace it "
                "or choose another --name"
            )

    def __enter__(self) -> DatasetWriter:
        self.root.mkdir(parents=True, exist_ok=True)
        reclaim_stale_temporaries(self.root)
        self.tmp = self.root / f".tmp-{self.name}-{os.getpid()}-{secrets.token_hex(4)}"
        self.tmp.mkdir()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.tmp is not None and self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _path(self, array_name: str) -> Path:
        if self.tmp is None:
            raise RuntimeError("DatasetWriter used outside its `with` block")
        return self.tmp / f"{array_name}.npy"

    def write(self, array_name: str, array) -> ArrayInfo:
        self.arrays[array_name] = write_npy(self._path(array_name), array)
        return self.arrays[array_name]

    def write_rows(self, array_name: str, source, order) -> ArrayInfo:
        self.arrays[array_name] = write_npy_rows(self._path(array_name), source, order)
        return self.arrays[array_name]

    @contextlib.contextmanager
    def stream(self, array_name: str, shape: tuple[int, ...], dtype) -> Iterator[NpyStreamWriter]:
        """An array written front to back in chunks (see `NpyStreamWriter`), recorded when the block ends."""
        stream = NpyStreamWriter(self._path(array_name), shape, dtype)
        try:
            yield stream
        except BaseException:
            stream.abort()
            raise
        self.arrays[array_name] = stream.close()

    def commit(self, manifest: DatasetManifest) -> Path:
        """Write the manifest and move the finished dataset under its name."""
        if self.tmp is None:
            raise RuntimeError("DatasetWriter.commit called outside its `with` block")
        path = self.tmp / MANIFEST_FILE
        path.write_text(manifest.model_dump_json(indent=2))
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        _fsync_dir(self.tmp)
        self.check_target()  # another writer may have finished first
        trash = None
        if self.final.exists():
            trash = self.root / f".trash-{self.name}-{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(self.final, trash)
        os.rename(self.tmp, self.final)
        self.tmp = None
        _fsync_dir(self.root)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        return self.final


def list_datasets(root: Path | None = None) -> list[DatasetManifest]:
    """Manifests of every prepared dataset under `root`, sorted by name (broken ones skipped)."""
    root = Path(root) if root else default_dataset_root()
    if not root.is_dir():
        return []
    manifests = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not entry.is_dir():
            continue
        try:
            manifests.append(read_manifest(entry))
        except PreparedDatasetError:
            continue
    return manifests


def remove_dataset(root: Path | None, name: str) -> Path:
    root = Path(root) if root else default_dataset_root()
    directory = root / validate_name(name)
    if directory.is_symlink():
        raise PreparedDatasetError(
            f"{directory} is a symbolic link, not a dataset graphtier prepared; nothing was removed (remove the link "
            "yourself if you mean to)"
        )
    if not directory.exists():
        raise PreparedDatasetError(f"no dataset named {name!r} under {root}")
    refusal = "nothing was removed: graphtier deletes only directories it prepared"
    if (directory / MANIFEST_FILE).is_symlink():
        raise PreparedDatasetError(f"{directory / MANIFEST_FILE} is a symbolic link; {refusal}")
    try:
        manifest = read_manifest(directory)
    except PreparedDatasetError:
        raise PreparedDatasetError(
            f"{directory} holds no valid graphtier manifest ({MANIFEST_FILE}); {refusal}"
        ) from None
    if manifest.name != name:
        raise PreparedDatasetError(f"{directory} holds dataset {manifest.name!r}, not {name!r}; {refusal}")
    ours = {MANIFEST_FILE} | {info.file for info in manifest.arrays.values()}
    extra = sorted(p.name for p in directory.iterdir() if p.name not in ours or p.is_symlink())
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise PreparedDatasetError(f"{directory} also holds files graphtier did not write ({shown}); {refusal}")
    trash = root / f".trash-{name}-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(directory, trash)
    shutil.rmtree(trash, ignore_errors=True)
    return directory
