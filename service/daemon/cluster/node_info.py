"""What this daemon says about itself to the cluster (`GetNode`): name, address, health, its
prepared datasets with their versions, and its load."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import psutil

from graphtier.contract.cluster.models import NodeDataset, NodeInfo, NodeLoad
from graphtier.service.prepared import list_datasets
from graphtier.service.prepared.digests import dataset_version


def prepared_datasets(root: Path, loaded: set[str]) -> list[NodeDataset]:
    """Every prepared dataset under `root` with its version, by name."""
    found = []
    for manifest in list_datasets(root):
        version = dataset_version(root / manifest.name)
        if version is None:
            continue
        size = sum(info.nbytes for info in manifest.arrays.values())
        found.append(
            NodeDataset(
                name=manifest.name,
                version=version,
                loaded=manifest.name in loaded,
                num_nodes=manifest.num_nodes,
                size_bytes=size,
            )
        )
    return found


def machine_load(active_jobs: int) -> NodeLoad:
    """Load averages, cores and memory of this machine."""
    load1, load5, load15 = os.getloadavg()
    memory = psutil.virtual_memory()
    return NodeLoad(
        load1=load1,
        load5=load5,
        load15=load15,
        cpus=os.cpu_count() or 1,
        memory_total_bytes=memory.total,
        memory_available_bytes=memory.available,
        active_jobs=active_jobs,
    )


class SelfDescription:
    """Builds this daemon's `NodeInfo` on demand from the parts that know the facts."""

    def __init__(
        self,
        *,
        name: str,
        address: str,
        dataset_root: Path,
        loaded: Callable[[], set[str]],
        active_jobs: Callable[[], int],
        serving: Callable[[], bool],
        gpus: int,
        started_at: datetime,
    ) -> None:
        self.name, self.address, self.dataset_root = name, address, dataset_root
        self._loaded, self._active, self._serving = loaded, active_jobs, serving
        self.gpus, self.started_at = gpus, started_at

    def __call__(self) -> NodeInfo:
        serving = self._serving()
        return NodeInfo(
            name=self.name,
            address=self.address,
            health="SERVING" if serving else "NOT_SERVING",
            message="" if serving else "the daemon is starting or stopping",
            pid=os.getpid(),
            gpus=self.gpus,
            datasets=prepared_datasets(self.dataset_root, self._loaded()),
            load=machine_load(self._active()),
            is_self=True,
            uptime_seconds=(datetime.now(timezone.utc) - self.started_at).total_seconds(),
        )
