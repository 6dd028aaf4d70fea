"""Where prepared datasets live, and the atomic writer that puts one there.

A dataset is a directory `<root>/<name>/` holding `manifest.json` and its `.npy` arrays.
It is written into a hidden sibling `.tmp-<name>-<pid>-<token>/` and renamed into place
only when complete, so a crash or Ctrl-C never leaves a half-written dataset under its
name; the next writer removes temporaries whose writer process is gone.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import psutil
from pydantic import ValidationError

from graphtier.contract.endpoints import default_dataset_root
from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.prepared.manifest import FORMAT_VERSION, MANIFEST_FILE, ArrayInfo, DatasetManifest

if TYPE_CHECKING:  # the writers need torch and numpy; listing and removing datasets do not
    import numpy as np
    import torch
    from numpy.typing import DTypeLike

    from graphtier.service.prepared.npy_io import NpyStreamWriter

ROWS_PER_CHUNK = 1 << 16  # rows gathered and written at a time by `write_rows`

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TMP_PATTERN = re.compile(r"^\.(tmp|trash)-(?P<name>.+)-(?P<pid>\d+)-(?P<token>[0-9a-f]+)$")


def validate_name(name: str) -> str:
    if not NAME_PATTERN.match(name):
        raise PreparedDatasetError(
            f"invalid dataset name {name!r}: use 1-64 characters from letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return name


def dataset_group_id(group: str | int | None) -> int | None:
    """The gid of `group` (a name or a number) that may read prepared datasets; None: only their owner."""
    if group is None or group == "":
        return None
    try:
        return int(group) if str(group).isdigit() else grp.getgrnam(str(group)).gr_gid
    except KeyError:
        raise PreparedDatasetError(f"--dataset-group {group!r}: no such group on this machine") from None


def restrict_to_owner(directory: Path, gid: int | None) -> None:
    """A finished dataset's directory 0700 and its files 0600, so other users cannot read it; with
    `gid`, group `gid` may read it too (0750 and 0640, owned by that group)."""
    try:
        for path in (*directory.iterdir(), directory):
            if gid is not None:
                os.chown(path, -1, gid)
            os.chmod(
                path, (0o750 if gid is not None else 0o700) if path.is_dir() else (0o640 if gid is not None else 0o600)
            )
    except OSError as exc:
        raise PreparedDatasetError(
            f"{exc.filename or directory}: cannot set the dataset's owner group or mode ({exc.strerror}); "
            "with --dataset-group, this user must belong to the group"
        ) from None


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
        if not match or psutil.pid_exists(int(match["pid"])):
            continue
        if entry.is_symlink():  # a link moved aside by an older writer: the link goes, never its target
            entry.unlink(missing_ok=True)
            removed.append(entry)
        elif entry.is_dir():
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

    def __init__(self, root: Path, name: str, *, overwrite: bool = False, group: str | int | None = None) -> None:
        self.root = Path(root)
        self.name = validate_name(name)
        self.gid = dataset_group_id(group)  # who besides the owner may read the dataset (see restrict_to_owner)
        self.final = self.root / name
        self.overwrite = overwrite
        self.arrays: dict[str, ArrayInfo] = {}
        self.tmp: Path | None = None
        self.check_target()

    def check_target(self) -> None:
        """Refuse an existing target unless --overwrite was given and it is a dataset graphtier prepared."""
        if not (self.final.exists() or self.final.is_symlink()):
            return
        if not self.overwrite:
            raise PreparedDatasetError(
                f"dataset {self.name!r} already exists at {self.final}; pass --overwrite to replace it "
                "or choose another --name"
            )
        check_prepared_by_graphtier(self.final, self.name, refusal="nothing was replaced")

    def __enter__(self) -> DatasetWriter:
        self.root.mkdir(mode=0o700 if self.gid is None else 0o750, parents=True, exist_ok=True)
        reclaim_stale_temporaries(self.root)
        tmp = self.root / f".tmp-{self.name}-{os.getpid()}-{secrets.token_hex(4)}"
        # An interrupt (Ctrl-C, SIGTERM) between the mkdir and the end of __enter__ never reaches
        # __exit__: the directory is removed here instead, so nothing half-made is left behind.
        try:
            tmp.mkdir(mode=0o700)  # nobody else reads a dataset while it is written
            self.tmp = tmp
            return self
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            self.tmp = None
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.tmp is not None and self.tmp.exists():
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _path(self, array_name: str) -> Path:
        if self.tmp is None:
            raise RuntimeError("DatasetWriter used outside its `with` block")
        return self.tmp / f"{array_name}.npy"

    def write(self, array_name: str, array: torch.Tensor | np.ndarray) -> ArrayInfo:
        import numpy as np
        import torch

        from graphtier.service.prepared.npy_io import write_npy

        if array_name == "features":  # the features' row checksums are written beside them
            data = array.contiguous().numpy() if isinstance(array, torch.Tensor) else np.asarray(array)
            with self.stream(array_name, data.shape, data.dtype) as out:
                out.write(data)
            return self.arrays[array_name]
        self.arrays[array_name] = write_npy(self._path(array_name), array)
        return self.arrays[array_name]

    def write_rows(self, array_name: str, source: torch.Tensor, order: torch.Tensor) -> ArrayInfo:
        """`source[order]` written without materialising it: gathered and written chunk by chunk."""
        with self.stream(array_name, (order.numel(), *source.shape[1:]), source.numpy().dtype) as out:
            for start in range(0, order.numel(), ROWS_PER_CHUNK):
                out.write(source.index_select(0, order[start : start + ROWS_PER_CHUNK]))
        return self.arrays[array_name]

    @contextlib.contextmanager
    def stream(self, array_name: str, shape: tuple[int, ...], dtype: DTypeLike) -> Iterator[NpyStreamWriter]:
        """An array written front to back in chunks (see `NpyStreamWriter`), recorded when the block ends.
        Feature arrays (a heterogeneous dataset's per type too) also get their per-row checksums
        (`feature_checksums[.<type>].npy`), which the storage tier's reads are checked against."""
        from graphtier.service.prepared.npy_io import NpyStreamWriter
        from graphtier.service.storage.row_checksums import checksum_array_for

        checksum_array = checksum_array_for(array_name)
        stream = NpyStreamWriter(self._path(array_name), shape, dtype, checksum_rows=checksum_array is not None)
        try:
            yield stream
        except BaseException:
            stream.abort()
            raise
        self.arrays[array_name] = stream.close()
        if stream.checksums is not None and checksum_array is not None:
            self.write(checksum_array, stream.checksums)

    def commit(self, manifest: DatasetManifest) -> Path:
        """Write the manifest and move the finished dataset under its name."""
        if self.tmp is None:
            raise RuntimeError("DatasetWriter.commit called outside its `with` block")
        path = self.tmp / MANIFEST_FILE
        # a homogeneous manifest is written without the `hetero` key, as before heterogeneous graphs existed
        path.write_text(manifest.model_dump_json(indent=2, exclude={"hetero"} if manifest.hetero is None else None))
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        restrict_to_owner(self.tmp, self.gid)
        _fsync_dir(self.tmp)
        self.check_target()  # another writer may have finished first
        replace_directory(self.tmp, self.final)
        self.tmp = None
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


# Files graphtier itself writes into a dataset directory besides the manifest and its arrays.
WRITTEN_BESIDE_ARRAYS = frozenset({"tiering-report.png"})


def check_prepared_by_graphtier(directory: Path, name: str, *, refusal: str) -> DatasetManifest:
    """The manifest of `directory` if graphtier prepared it, else PreparedDatasetError naming the path and why.

    The one test every delete or replace passes first: a real directory (not a link), with a valid
    manifest of dataset `name`, holding only the files that manifest lists (and files graphtier writes
    beside them). A user's file inside a dataset directory makes it the user's: it is refused too.
    `refusal` says what did not happen ("nothing was removed").
    """
    refusal = f"{refusal}: graphtier deletes only directories it prepared"
    if directory.is_symlink():
        raise PreparedDatasetError(
            f"{directory} is a symbolic link, not a dataset graphtier prepared; {refusal} (remove the link "
            "yourself if you mean to)"
        )
    if not directory.is_dir():
        raise PreparedDatasetError(f"{directory} is not a directory; {refusal}")
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
    ours = {MANIFEST_FILE} | WRITTEN_BESIDE_ARRAYS | {info.file for info in manifest.arrays.values()}
    extra = sorted(p.name for p in directory.iterdir() if p.name not in ours or p.is_symlink() or p.is_dir())
    if extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        raise PreparedDatasetError(
            f"{directory} also holds files graphtier did not write ({shown}); {refusal} (move them out first)"
        )
    return manifest


def replace_directory(new: Path, final: Path) -> None:
    """Move the finished directory `new` to `final`, its sibling; a dataset already at `final` (the
    caller has checked it with `check_prepared_by_graphtier`) is moved aside first, then deleted."""
    trash = None
    if final.exists() or final.is_symlink():
        trash = final.parent / f".trash-{final.name}-{os.getpid()}-{secrets.token_hex(4)}"
        os.rename(final, trash)
    os.rename(new, final)
    _fsync_dir(final.parent)
    if trash is not None:
        if trash.is_symlink():
            trash.unlink()
        else:
            shutil.rmtree(trash, ignore_errors=True)


def remove_dataset(root: Path | None, name: str) -> Path:
    """Delete the dataset `name` under `root`, only if graphtier prepared it (see `check_prepared_by_graphtier`)."""
    root = Path(root) if root else default_dataset_root()
    directory = root / validate_name(name)
    if not (directory.exists() or directory.is_symlink()):
        raise PreparedDatasetError(f"no dataset named {name!r} under {root}")
    check_prepared_by_graphtier(directory, name, refusal="nothing was removed")
    trash = root / f".trash-{name}-{os.getpid()}-{secrets.token_hex(4)}"
    os.rename(directory, trash)
    shutil.rmtree(trash, ignore_errors=True)
    return directory
