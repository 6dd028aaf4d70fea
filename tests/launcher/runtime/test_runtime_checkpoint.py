"""Checkpoints: atomic files named by step, bounded retention, clear errors for bad files."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.checkpoint import (
    TrainPosition,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    remove_partial_writes,
    save_checkpoint,
)


def _save(directory, step, keep=2):
    model = {"w": torch.full((3,), float(step))}
    return save_checkpoint(
        directory, TrainPosition(1, step % 5, step), model, {"state": {}, "param_groups": []}, keep=keep
    )


def test_save_load_round_trip_and_retention(tmp_path):
    assert latest_checkpoint(tmp_path / "none") is None
    for step in (3, 12, 100):
        _save(tmp_path / "ck", step)
    assert [p.name for p in list_checkpoints(tmp_path / "ck")] == ["ckpt-000000012.pt", "ckpt-000000100.pt"]
    position, payload = load_checkpoint(latest_checkpoint(tmp_path / "ck"))
    assert position == TrainPosition(1, 0, 100)
    assert torch.equal(payload["model"]["w"], torch.full((3,), 100.0))
    assert not list((tmp_path / "ck").glob(".*"))  # no temporary file is left behind


def test_partial_writes_are_ignored_and_cleaned(tmp_path):
    _save(tmp_path, 7)
    torn = tmp_path / ".ckpt-000000009.pt.abc123.tmp"
    torn.write_bytes(b"half a checkpoint")
    assert latest_checkpoint(tmp_path).name == "ckpt-000000007.pt"
    remove_partial_writes(tmp_path)
    assert not torn.exists() and (tmp_path / "ckpt-000000007.pt").exists()


def test_unreadable_checkpoints_name_the_file(tmp_path):
    bad = tmp_path / "ckpt-000000001.pt"
    bad.write_bytes(b"not a zip")
    with pytest.raises(GraphtierError, match=r"ckpt-000000001\.pt: not a readable graphtier checkpoint"):
        load_checkpoint(bad)
    foreign = tmp_path / "ckpt-000000002.pt"
    torch.save({"weights": torch.zeros(1)}, foreign)
    with pytest.raises(GraphtierError, match="format None is not the supported format 1"):
        load_checkpoint(foreign)


def test_a_full_disk_names_the_checkpoint_and_the_disk(tmp_path):
    """torch.save on a full filesystem says `[enforce fail at inline_container.cc:...]`; the error names both."""
    import subprocess

    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        model = {"w": torch.zeros(1 << 16)}  # 256 KiB: more than the disk holds
        with pytest.raises(GraphtierError) as failure:
            save_checkpoint(full / "ck", TrainPosition(0, 1, 1), model, {"state": {}, "param_groups": []})
        said = str(failure.value)
        assert said.startswith(f"cannot write checkpoint {full / 'ck' / 'ckpt-000000001.pt'}: the disk holding it")
        assert f"mounted at {full})" in said and "is full" in said and "enforce fail" not in said
        assert list((full / "ck").iterdir()) == []  # nothing half-written is left
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_checkpoint_steps_come_from_names_and_positions_rescale_to_a_new_world_size(tmp_path):
    from graphtier.contract.jobs.directory import checkpoint_file, checkpoint_step
    from graphtier.launcher.runtime.session import _rescaled

    assert checkpoint_step(checkpoint_file(tmp_path, 120)) == 120
    assert [checkpoint_step(tmp_path / n) for n in ("ckpt-12.pt", ".ckpt-000000120.pt.x.tmp", "ckpt-00000012x.pt")] == [
        None
    ] * 3
    at = TrainPosition(epoch=2, batch=5, step=40)
    # 3 ranks did 5 batches each of epoch 2: 15 of the epoch's batches, 7 each for 2 ranks (rounded down)
    assert _rescaled(at, {"extra": {"world_size": 3}}, 2) == TrainPosition(2, 7, 40)
    assert _rescaled(at, {"extra": {"world_size": 2}}, 2) == at  # the same ranks
    assert _rescaled(at, {"extra": {}}, 2) == at  # written before the world size was recorded
    assert _rescaled(TrainPosition(3, 0, 40), {"extra": {"world_size": 3}}, 2) == TrainPosition(3, 0, 40)
