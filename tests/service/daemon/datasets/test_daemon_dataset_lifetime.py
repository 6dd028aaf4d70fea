"""A loaded dataset is a version: re-prepared or removed data is never handed to a new job, old
copies go when their jobs do, idle copies are unloaded, and a shared-memory budget is kept."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from graphtier.contract.errors import SharedMemoryError, UnknownDatasetError
from graphtier.service.daemon.datasets.lifetime import LifetimePolicy
from graphtier.service.daemon.datasets.registry import DatasetRegistry


def _copy(small_rmat, root, name: str) -> None:
    shutil.copytree(small_rmat.directory, root / name)
    manifest = json.loads((root / name / "manifest.json").read_text())
    manifest["name"] = name
    (root / name / "manifest.json").write_text(json.dumps(manifest, indent=2))


def _segments(layout) -> set[str]:
    handle = layout.handle
    return {handle.colptr.name, handle.row.name, handle.resident_features.name}


def _exists(names) -> list[bool]:
    return [os.path.exists(f"/dev/shm/{n}") for n in names]


@pytest.fixture
def root(tmp_path, small_rmat):
    root = tmp_path / "datasets"
    for name in ("a", "b"):
        _copy(small_rmat, root, name)
    return root


def test_a_reprepared_dataset_is_reloaded_and_the_old_copy_lives_until_its_jobs_end(root):
    users: dict[str, list[str]] = {"a": ["1"]}
    registry = DatasetRegistry(root, users=lambda name: users.get(name, []))
    try:
        first = registry.load("a").layout
        old_version = registry.get("a").version
        manifest = root / "a" / "manifest.json"
        changed = json.loads(manifest.read_text())  # `prepare --overwrite` with another damping: a new version
        changed["score"] = {**changed["score"], "damping": 0.5}
        manifest.write_text(json.dumps(changed))
        second = registry.layout("a")
        assert _segments(second).isdisjoint(_segments(first))  # a new copy, never the stale one
        assert all(_exists(_segments(first)))  # job 1 still reads the old version
        assert registry.sweep() == []
        users["a"] = []
        assert registry.sweep() == [f"a@{old_version}"] and registry.get("a").version != old_version
        assert not any(_exists(_segments(first))) and all(_exists(_segments(second)))
    finally:
        registry.close()


def test_a_removed_dataset_is_never_served_again(root):
    registry = DatasetRegistry(root)
    try:
        layout = registry.load("b").layout
        shutil.rmtree(root / "b")
        with pytest.raises(UnknownDatasetError, match="no prepared dataset 'b'"):
            registry.layout("b")
        with pytest.raises(UnknownDatasetError):
            registry.load("b")
        registry.sweep()
        assert not any(_exists(_segments(layout)))
    finally:
        registry.close()


def test_idle_datasets_are_unloaded_after_the_idle_time(root):
    busy: list[str] = []
    registry = DatasetRegistry(
        root, users=lambda name: busy if name == "a" else [], policy=LifetimePolicy(idle_unload_s=30)
    )
    try:
        a, b = registry.load("a").layout, registry.load("b").layout
        busy.append("7")
        registry.sweep()  # a is in use: its clock restarts
        loaded_at = registry.get("b").last_used
        assert registry.sweep(now=loaded_at + 10) == []
        assert registry.sweep(now=loaded_at + 31) == ["b"]
        assert not any(_exists(_segments(b))) and all(_exists(_segments(a)))
    finally:
        registry.close()


def test_the_shm_budget_unloads_idle_datasets_least_recently_used_first(root):
    busy: set[str] = set()
    one = DatasetRegistry(root)
    one.load("a")  # measure one copy
    per_copy = sum(seg.nbytes for seg in one.get("a").store.owner.segments.values())
    one.close()
    registry = DatasetRegistry(
        root,
        users=lambda name: ["9"] if name in busy else [],
        policy=LifetimePolicy(shm_budget_bytes=int(per_copy * 1.5)),
    )
    try:
        a = registry.load("a").layout
        b = registry.load("b").layout  # does not fit beside a: idle a makes room
        assert not any(_exists(_segments(a))) and all(_exists(_segments(b)))
        busy.add("b")
        with pytest.raises(SharedMemoryError, match=r"loading dataset 'a' needs \d+ bytes .* in use \(b\)"):
            registry.load("a")
    finally:
        registry.close()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_dataset_unload_command_frees_a_loaded_dataset(daemon_processes, small_rmat):
    from graphtier.launcher.client.data_plane import DataPlaneClient

    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()
    with DataPlaneClient(endpoints.grpc_target) as client:
        layout = client.load_dataset("rmat12").layout
    cli = [
        sys.executable,
        "-m",
        "graphtier.launcher.cli",
        "dataset",
        "unload",
        "--runtime-dir",
        str(daemon.runtime_dir),
    ]
    done = subprocess.run([*cli, "rmat12", "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["released_bytes"] > 0 and not any(_exists(_segments(layout)))
    again = subprocess.run([*cli, "rmat12"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "dataset 'rmat12' is not loaded in this daemon" in again.stdout + again.stderr


def test_a_storage_file_changed_after_loading_is_checked_again_before_a_new_job_reads_it(root):
    from graphtier.contract.datasets import BudgetSpec
    from graphtier.contract.errors import PreparedDatasetError
    from graphtier.service.prepared.npy_io import npy_data_offset

    registry = DatasetRegistry(root)
    try:
        layout = registry.load("a", BudgetSpec(host="50%")).layout
        assert layout.handle.storage_features is not None  # half the rows are read from the file at run time
        features = root / "a" / "features.npy"
        with open(features, "r+b") as f:  # same size, same manifest: only the file itself changed
            f.seek(npy_data_offset(features) + os.path.getsize(features) // 2 // 4 * 4)
            f.write(b"\xff\xff\xc0\x7f")  # a NaN
        with pytest.raises(PreparedDatasetError, match="checksum mismatch for 'features'"):
            registry.layout("a")  # what a new job asks: the copy is stale, and the file fails its check
    finally:
        registry.close()


def test_a_directory_whose_manifest_names_another_dataset_is_refused(tmp_path, small_rmat):
    from graphtier.contract.errors import InvalidRequestError

    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "ycopy")  # `cp -a y ycopy`: the manifest still says rmat12
    registry = DatasetRegistry(root, policy=LifetimePolicy(idle_unload_s=1))
    try:
        with pytest.raises(InvalidRequestError, match=r"holds dataset 'rmat12' \(its manifest's name\), not 'ycopy'"):
            registry.load("ycopy")
        assert registry.loaded() == [] and registry.sweep(now=1e12) == []
    finally:
        registry.close()
