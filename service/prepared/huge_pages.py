"""Whether numpy backs the preparation's large arrays with transparent huge pages.

numpy asks the kernel for huge pages (`madvise(MADV_HUGEPAGE)`) for every array of 4 MiB or
more. On bare metal that is a win: one fault per 2 MiB and fewer TLB misses. On a VM whose
balloon reports free memory to the host (virtio-balloon free page reporting), memory the
process frees goes back to the host in large blocks, so the huge pages of the next array are
faulted in from the host: there the first touch of a fresh array is several times slower with
huge pages than with 4 KiB pages, and a whole preparation is slower with them.

So the preparation turns numpy's huge pages off while it runs when the host reclaims free
pages, unless the user chose for numpy with `NUMPY_MADVISE_HUGEPAGE`; the choice and why
go in the manifest.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

VIRTIO_BALLOON_DEVICE = 0x0005  # virtio device id of the memory balloon
VIRTIO_BALLOON_F_REPORTING = 5  # feature bit: the guest reports free pages to the host
NUMPY_ENV = "NUMPY_MADVISE_HUGEPAGE"


def host_reclaims_free_pages(sys_root: Path = Path("/sys")) -> bool:
    """True when a virtio balloon with free page reporting is bound: the host takes freed memory back."""
    for device in (sys_root / "bus" / "virtio" / "devices").glob("*"):
        try:
            if int((device / "device").read_text().strip(), 16) != VIRTIO_BALLOON_DEVICE:
                continue
            features = (device / "features").read_text().strip()  # one '0'/'1' per feature bit, bit 0 first
        except (OSError, ValueError):
            continue
        if (
            len(features) > VIRTIO_BALLOON_F_REPORTING
            and features[VIRTIO_BALLOON_F_REPORTING] == "1"
            and (device / "driver").exists()
        ):
            return True
    return False


def _numpy_switch() -> Callable[[bool], bool] | None:
    """numpy's setter for its huge-page advice (returns the previous value), or None if it has none."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        with contextlib.suppress(ImportError, AttributeError):
            return __import__(module, fromlist=["_set_madvise_hugepage"])._set_madvise_hugepage
    return None


def _in_force(switch: Callable[[bool], bool]) -> bool:
    previous = switch(True)
    switch(previous)
    return bool(previous)


@contextlib.contextmanager
def numpy_huge_pages_for_preparation(sys_root: Path = Path("/sys")) -> Iterator[dict[str, object]]:
    """Within the block numpy's huge pages are off when the host reclaims free pages (see the module
    docstring); restored after. Yields what is in force and why, for the manifest."""
    switch = _numpy_switch()
    if switch is None:
        yield {"numpy_huge_pages": False, "why": "this numpy cannot advise huge pages"}
        return
    if os.environ.get(NUMPY_ENV) is not None:
        yield {"numpy_huge_pages": _in_force(switch), "why": f"{NUMPY_ENV} is set"}
        return
    if not host_reclaims_free_pages(sys_root):
        yield {"numpy_huge_pages": _in_force(switch), "why": "numpy's default"}
        return
    previous = switch(False)
    try:
        yield {"numpy_huge_pages": False, "why": "the host reclaims free pages (virtio-balloon free page reporting)"}
    finally:
        switch(previous)
