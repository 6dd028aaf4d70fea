"""numpy's huge pages during preparation: off where the host reclaims free pages, restored after."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from graphtier.service.prepared import huge_pages
from graphtier.service.prepared.huge_pages import host_reclaims_free_pages, numpy_huge_pages_for_preparation


def virtio_device(sys_root: Path, name: str, device: int, features: str, *, bound: bool = True) -> None:
    """A virtio device as sysfs lists it: its id, its feature bits ('0'/'1', bit 0 first), its driver link."""
    folder = sys_root / "bus" / "virtio" / "devices" / name
    folder.mkdir(parents=True)
    (folder / "device").write_text(f"0x{device:04x}\n")
    (folder / "features").write_text(features + "\n")
    if bound:
        (folder / "driver").mkdir()


@pytest.mark.parametrize(
    ("devices", "reclaims"),
    [
        ([("virtio0", 0x5, "0110010100000000")], True),  # balloon with free page reporting (bit 5)
        ([("virtio0", 0x5, "0110000100000000")], False),  # balloon without it
        ([("virtio0", 0x2, "0110010100000000")], False),  # a block device with bit 5 set
        ([("virtio0", 0x1, "1"), ("virtio1", 0x5, "000001")], True),
        ([], False),  # bare metal: no virtio devices at all
    ],
)
def test_free_page_reporting_is_read_from_the_balloon_features(tmp_path, devices, reclaims):
    for name, device, features in devices:
        virtio_device(tmp_path, name, device, features)
    assert host_reclaims_free_pages(tmp_path) is reclaims


def test_an_unbound_or_unreadable_balloon_does_not_count(tmp_path):
    virtio_device(tmp_path, "virtio0", 0x5, "000001", bound=False)
    folder = tmp_path / "bus" / "virtio" / "devices" / "virtio1"
    folder.mkdir()
    (folder / "device").write_text("not a number\n")
    assert not host_reclaims_free_pages(tmp_path)


def test_huge_pages_are_off_inside_and_restored_after(tmp_path, monkeypatch):
    monkeypatch.delenv(huge_pages.NUMPY_ENV, raising=False)
    virtio_device(tmp_path, "virtio0", 0x5, "000001")
    switch = huge_pages._numpy_switch()
    assert switch is not None, f"numpy {np.__version__} has no _set_madvise_hugepage"
    before = switch(True)
    try:
        with numpy_huge_pages_for_preparation(tmp_path) as decided:
            assert decided["numpy_huge_pages"] is False and "free page reporting" in decided["why"]
            assert switch(False) is False  # what was in force inside the block
        assert switch(True) is True  # restored
        with pytest.raises(KeyboardInterrupt), numpy_huge_pages_for_preparation(tmp_path):
            raise KeyboardInterrupt  # an interrupted preparation restores it too
        assert switch(True) is True
        with numpy_huge_pages_for_preparation(tmp_path / "bare-metal") as decided:
            assert decided == {"numpy_huge_pages": True, "why": "numpy's default"}
            assert switch(True) is True
        monkeypatch.setenv(huge_pages.NUMPY_ENV, "1")  # the user's choice for numpy wins
        with numpy_huge_pages_for_preparation(tmp_path) as decided:
            assert decided["numpy_huge_pages"] is True and huge_pages.NUMPY_ENV in decided["why"]
            assert switch(True) is True
    finally:
        switch(before)
