"""How long a loaded dataset lives: its version, idle unloading and a shared-memory budget.

A loaded copy is a *version* of a dataset: a hash of its content (every file's sha256 and the
preparation's parameters, `content_version`; never the manifest's timings). When `prepare
--overwrite` or `dataset remove` changes what is on disk, the copy is retired: new jobs never get
it (they get the new version, or a clear error if the dataset is gone) and it is unloaded once no
unfinished job uses the name. Idle copies (no unfinished job) are unloaded after `idle_unload_s`,
and least recently used idle copies make room when a load would pass the daemon's shared-memory
budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.placement import PlacementPlan
from graphtier.service.placement.tier_budget import parse_budget
from graphtier.service.prepared import DatasetManifest
from graphtier.service.prepared.digests import dataset_version

SHM_DIR = "/dev/shm"


def manifest_version(directory: Path) -> str | None:
    """The version of the prepared dataset in `directory` (16 hex digits of its content version,
    `dataset_version`), None when it is gone or unreadable."""
    version = dataset_version(directory)
    return None if version is None else version[:16]


def file_identity(path: Path) -> tuple[int, ...] | None:
    """What changes whenever a file's bytes may have: device, inode, size, mtime and ctime (a
    user can set mtime back, not ctime). None when the file is gone."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def resident_estimate(
    manifest: DatasetManifest, plan: PlacementPlan, hetero_plans: dict[str, PlacementPlan] | None = None
) -> int:
    """Shared-memory bytes a load with `plan` takes: structure, labels, splits and the host rows (of
    every featured node type by its own plan, for a heterogeneous dataset, with its edge types)."""
    arrays = manifest.arrays
    fixed = sum(
        arrays[k].nbytes
        for k in ("colptr", "row", "edge_type", "labels", "train_ids", "val_ids", "test_ids")
        if k in arrays
    )
    hetero = sum(p.host_end * p.row_bytes for p in (hetero_plans or {}).values())
    return fixed + plan.host_end * plan.row_bytes + hetero


@dataclass(frozen=True)
class LifetimePolicy:
    """`idle_unload_s`: unload a copy no job has used for this long (0 = never). `shm_budget_bytes`:
    what all loaded copies may hold in /dev/shm together (None = no limit)."""

    idle_unload_s: float = 0.0
    shm_budget_bytes: int | None = None

    @classmethod
    def from_config(cls, idle_unload_s: float, shm_budget: str) -> LifetimePolicy:
        stat = os.statvfs(SHM_DIR)
        total = stat.f_blocks * stat.f_frsize
        return cls(
            idle_unload_s=idle_unload_s, shm_budget_bytes=parse_budget(shm_budget, total_bytes=total, what="shm_budget")
        )


def over_budget(name: str, need: int, used: int, budget: int, busy: list[str]) -> SharedMemoryError:
    return SharedMemoryError(
        f"loading dataset {name!r} needs {need} bytes of shared memory but the daemon's budget is {budget} bytes "
        f"and {used} are held by datasets in use ({', '.join(busy) or 'none'}); unload one "
        "(`graphtier dataset unload NAME`), lower the host budget, or raise shm_budget"
    )
