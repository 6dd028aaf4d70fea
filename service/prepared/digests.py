"""The two checksums a prepared file carries: sha256 (the dataset's identity, `inspect --verify`) and
BLAKE3 (what the daemon checks while loading: much less CPU per byte than sha256, so verifying a
load costs little even when the machine is busy; cryptographic like sha256, so a file cannot be
changed to match it)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol

import blake3

from graphtier.service.prepared.manifest import MANIFEST_FILE, DatasetManifest, content_version

CHUNK_BYTES = 64 << 20


class Digest(Protocol):
    """A running hash: sha256's (hashlib) or BLAKE3's."""

    def update(self, data: memoryview | bytes, /) -> object: ...

    def hexdigest(self) -> str: ...


class FileDigests:
    """sha256 and BLAKE3 of one file's bytes."""

    def __init__(self) -> None:
        self._sha256 = hashlib.sha256()
        self._blake3 = blake3.blake3()

    @property
    def updaters(self) -> tuple:
        """The two digests' own `update`s, for a caller that feeds them from two threads (both
        release the GIL while hashing), each seeing every byte in order."""
        return self._sha256.update, self._blake3.update

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()

    @property
    def blake3(self) -> str:
        return self._blake3.hexdigest()


def new_digest(algorithm: str) -> Digest:
    """A fresh hasher for `algorithm` ('sha256' or 'blake3'), with `update` and `hexdigest`."""
    return blake3.blake3() if algorithm == "blake3" else hashlib.sha256()


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    digest = new_digest(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def dataset_version(directory: Path) -> str | None:
    """The version of the prepared dataset in `directory` (sha256 hex of its content: `content_version`);
    None when there is no readable, valid manifest."""
    try:
        manifest = DatasetManifest.model_validate_json((Path(directory) / MANIFEST_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return content_version(manifest)
