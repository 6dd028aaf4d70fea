"""Moving a prepared dataset to another node: `send_dataset` streams it, `DatasetReceiver` writes it.

The stream is a header (name, version = the hash of the dataset's content, `dataset_version`;
each file's name, size and sha256 as the manifest records it, manifest.json's its own) followed
by every file's bytes in order, in chunks of CHUNK_BYTES; manifest.json comes last. The receiver
writes into a `.tmp-<name>-<pid>-*` directory beside the dataset root's datasets (the same
temporaries `dataset prepare` uses, so a daemon killed mid-transfer leaves nothing the next one
does not remove), checks each file's sha256 as its last byte arrives and the manifest against the
header, and only then renames the directory into place. A cut connection, a short or long file, a
wrong checksum: the temporary directory is removed and nothing appears under the dataset's name.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from graphtier.contract.cluster.models import PushResult
from graphtier.contract.errors import (
    DaemonError,
    DatasetTransferError,
    InvalidRequestError,
    PreparedDatasetError,
    UnknownDatasetError,
)
from graphtier.service.daemon.cluster.peer_client import PeerClient
from graphtier.service.prepared.catalog import (
    check_prepared_by_graphtier,
    read_manifest,
    reclaim_stale_temporaries,
    replace_directory,
    restrict_to_owner,
    validate_name,
)
from graphtier.service.prepared.digests import dataset_version
from graphtier.service.prepared.manifest import MANIFEST_FILE
from graphtier.v1 import cluster_pb2

CHUNK_BYTES = 1 << 20


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dataset_files(directory: Path) -> tuple[str, list[cluster_pb2.DatasetFile]]:
    """(version, files) of the prepared dataset in `directory`: every array the manifest lists with
    its recorded sha256, then manifest.json itself with its file's sha256."""
    try:
        manifest = read_manifest(directory)
    except PreparedDatasetError as exc:
        raise UnknownDatasetError(str(exc)) from None
    version = dataset_version(directory)
    if version is None:
        raise UnknownDatasetError(f"{directory}: no readable manifest")
    files = [
        cluster_pb2.DatasetFile(name=info.file, size_bytes=(directory / info.file).stat().st_size, sha256=info.sha256)
        for info in manifest.arrays.values()
    ]
    files.append(
        cluster_pb2.DatasetFile(
            name=MANIFEST_FILE,
            size_bytes=(directory / MANIFEST_FILE).stat().st_size,
            sha256=hashlib.sha256((directory / MANIFEST_FILE).read_bytes()).hexdigest(),
        )
    )
    return version, files


def _chunks(directory: Path, header: cluster_pb2.DatasetHeader) -> Iterator[cluster_pb2.DatasetChunk]:
    yield cluster_pb2.DatasetChunk(header=header)
    for file in header.files:
        with open(directory / file.name, "rb") as f:
            while block := f.read(CHUNK_BYTES):
                yield cluster_pb2.DatasetChunk(data=cluster_pb2.FileData(chunk=block))


def send_dataset(root: Path, name: str, peer: PeerClient, *, replace: bool) -> PushResult:
    """Stream prepared dataset `name` under `root` to `peer`; what the peer answered."""
    validate_name(name)
    directory = root / name
    if not (directory / MANIFEST_FILE).is_file():
        raise UnknownDatasetError(f"no prepared dataset {name!r} under this daemon's dataset root {root}")
    version, files = dataset_files(directory)
    node = peer.get_node()
    theirs = node.dataset(name)
    total = sum(f.size_bytes for f in files)
    if theirs is not None and theirs.version == version:
        return PushResult(node=node.name, name=name, version=version, bytes=0, seconds=0.0, unchanged=True)
    if theirs is not None and not replace:
        raise DaemonError(
            f"node {peer.where} already has dataset {name!r} at another version ({theirs.version[:16]}, "
            f"this node's {version[:16]}); pass --replace to overwrite it"
        )
    header = cluster_pb2.DatasetHeader(name=name, version=version, files=files, replace=replace)
    started = time.perf_counter()
    reply = peer.receive_dataset(_chunks(directory, header))
    return PushResult(
        node=node.name,
        name=reply.name,
        version=reply.version,
        bytes=total,
        seconds=time.perf_counter() - started,
        unchanged=reply.unchanged,
    )


def _check_header(header: cluster_pb2.DatasetHeader) -> None:
    validate_name(header.name)
    names = [f.name for f in header.files]
    if MANIFEST_FILE not in names or len(set(names)) != len(names):
        raise InvalidRequestError(
            f"dataset stream {header.name!r}: the files must be distinct and include {MANIFEST_FILE}"
        )
    for file in header.files:
        if not file.name or "/" in file.name or file.name.startswith(".") or len(file.name) > 255:
            raise InvalidRequestError(
                f"dataset stream {header.name!r}: file name {file.name[:100]!r} is not a plain name"
            )
        if len(file.sha256) != 64:
            raise InvalidRequestError(f"dataset stream {header.name!r}: file {file.name!r} has no sha256")


class DatasetReceiver:
    """Writes dataset streams into `root` atomically (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def receive(self, chunks: Iterator[cluster_pb2.DatasetChunk]) -> cluster_pb2.ReceiveDatasetResponse:
        first = next(chunks, None)
        if first is None or first.WhichOneof("part") != "header":
            raise InvalidRequestError("a dataset stream starts with its header")
        header = first.header
        _check_header(header)
        final = self.root / header.name
        existing = dataset_version(final)
        if existing is not None and existing != header.version and not header.replace:
            raise DaemonError(
                f"dataset {header.name!r} exists here at another version ({existing[:16]}); the sender "
                "must pass replace to overwrite it"
            )
        if (final.exists() or final.is_symlink()) and existing != header.version:
            try:  # replaced only if graphtier prepared it: never a user's directory or a link's target
                check_prepared_by_graphtier(final, header.name, refusal="nothing was received")
            except PreparedDatasetError as exc:
                raise DaemonError(str(exc)) from None
        total = sum(f.size_bytes for f in header.files)
        self.root.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.root).free
        if total > free:
            raise DatasetTransferError(f"dataset {header.name!r} needs {total} bytes; {self.root} has {free} free")
        reclaim_stale_temporaries(self.root)
        tmp = self.root / f".tmp-{header.name}-{os.getpid()}-{secrets.token_hex(4)}"
        tmp.mkdir()
        try:
            self._write_files(header, chunks, tmp)
            self._check_manifest(header, tmp)
            if existing == header.version:  # checked, and already here: keep what jobs may be reading
                return cluster_pb2.ReceiveDatasetResponse(
                    name=header.name, version=header.version, bytes=total, unchanged=True
                )
            self._commit(tmp, final)
            return cluster_pb2.ReceiveDatasetResponse(name=header.name, version=header.version, bytes=total)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    @staticmethod
    def _write_files(header: cluster_pb2.DatasetHeader, chunks: Iterator[cluster_pb2.DatasetChunk], tmp: Path) -> None:
        pending: bytes = b""
        for file in header.files:
            digest, written = hashlib.sha256(), 0
            with open(tmp / file.name, "wb") as out:
                while written < file.size_bytes:
                    if not pending:
                        message = next(chunks, None)
                        if message is None:
                            raise DatasetTransferError(
                                f"dataset stream {header.name!r} ended inside {file.name!r} "
                                f"({written} of {file.size_bytes} bytes)"
                            )
                        if message.WhichOneof("part") != "data":
                            raise InvalidRequestError(f"dataset stream {header.name!r}: a second header")
                        pending = message.data.chunk
                    take = pending[: file.size_bytes - written]
                    pending = pending[len(take) :]
                    out.write(take)
                    digest.update(take)
                    written += len(take)
                out.flush()
                os.fsync(out.fileno())
            if digest.hexdigest() != file.sha256:
                raise DatasetTransferError(
                    f"dataset stream {header.name!r}: {file.name} arrived with sha256 "
                    f"{digest.hexdigest()[:16]}, expected {file.sha256[:16]}; nothing was kept"
                )
        if pending or next(chunks, None) is not None:
            raise DatasetTransferError(f"dataset stream {header.name!r} carries more bytes than its header lists")

    @staticmethod
    def _check_manifest(header: cluster_pb2.DatasetHeader, tmp: Path) -> None:
        if dataset_version(tmp) != header.version:
            raise DatasetTransferError(f"dataset stream {header.name!r}: manifest does not match the version sent")
        try:
            manifest = read_manifest(tmp)
        except PreparedDatasetError as exc:
            raise DatasetTransferError(f"dataset stream {header.name!r}: {exc}") from None
        sent = {f.name: f.sha256 for f in header.files}
        for info in manifest.arrays.values():
            if sent.get(info.file) != info.sha256:
                raise DatasetTransferError(
                    f"dataset stream {header.name!r}: {info.file} is missing or differs from what its manifest records"
                )
        if json.loads((tmp / MANIFEST_FILE).read_text()).get("name") != header.name:
            raise DatasetTransferError(f"dataset stream {header.name!r}: its manifest names another dataset")

    def _commit(self, tmp: Path, final: Path) -> None:
        restrict_to_owner(tmp, None)  # as a dataset prepared here: the daemon's user only
        _fsync(tmp)
        replace_directory(tmp, final)
