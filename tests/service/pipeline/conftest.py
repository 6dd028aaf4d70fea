"""Fixtures for the producer-channel tests: a tiered shm copy of `small_rmat`, short channel dirs."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from graphtier.service.pipeline import ProducerConfig
from graphtier.service.store import SharedDatasetStore


@pytest.fixture(scope="module")
def store(small_rmat, tiered_plan) -> Iterator[SharedDatasetStore]:
    """small_rmat in every tier: replicated, interleaved over 2 devices, host and storage rows."""
    plan = tiered_plan(replicated=20, interleaved=10, num_devices=2)
    with SharedDatasetStore(small_rmat, plan) as shared:
        yield shared


@pytest.fixture
def channel_dir() -> Iterator[Path]:
    """A short directory (Unix socket paths are limited to 107 bytes), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="gtch-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def make_config(store, channel_dir) -> Callable[..., ProducerConfig]:
    def make(**overrides: object) -> ProducerConfig:
        fields: dict[str, object] = dict(
            dataset=store.handle,
            rank=0,
            world_size=1,
            fanouts=[5, 3],
            batch_size=64,
            epochs=2,
            seed=11,
            channel_dir=channel_dir,
            num_slots=2,
            num_threads=1,
            heartbeat_interval_s=0.05,
        )
        fields.update(overrides)
        return ProducerConfig(**fields)

    return make


@pytest.fixture
def segments_of() -> Callable[[int], list[str]]:
    """graphtier shm segments whose name says process `pid` owns them."""

    def find(pid: int) -> list[str]:
        return [name for name in os.listdir("/dev/shm") if name.startswith(f"graphtier.{pid}.")]

    return find
