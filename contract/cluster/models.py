"""The cluster as clients and daemons see it: nodes, their datasets and load, and what a dataset
push did. Mirrors `graphtier/v1/cluster.proto`; conversions live in `cluster/conversions.py`.
(Where a part of a multi-node job stands, `JobPlacementInfo`/`JobNodeInfo`, is in `jobs/view.py`.)"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

NodeHealth = Literal["SERVING", "NOT_SERVING", "UNREACHABLE", "REFUSED"]


class NodeDataset(BaseModel):
    """A prepared dataset on a node; `version` is the hash of its content (arrays, preparation parameters)."""

    model_config = ConfigDict(frozen=True)

    name: str
    version: str
    loaded: bool = False
    num_nodes: int = 0
    size_bytes: int = 0


class NodeLoad(BaseModel):
    """How busy a node is: load averages, cores, memory, unfinished jobs."""

    model_config = ConfigDict(frozen=True)

    load1: float = 0.0
    load5: float = 0.0
    load15: float = 0.0
    cpus: int = 0
    memory_total_bytes: int = 0
    memory_available_bytes: int = 0
    active_jobs: int = 0


class NodeInfo(BaseModel):
    """One node of the cluster as its daemon describes itself (or why it could not)."""

    model_config = ConfigDict(frozen=True)

    name: str
    address: str
    health: NodeHealth
    message: str = ""
    pid: int = 0
    gpus: int = 0
    datasets: list[NodeDataset] = Field(default_factory=list)
    load: NodeLoad = Field(default_factory=NodeLoad)
    is_self: bool = False
    uptime_seconds: float = 0.0

    @property
    def serving(self) -> bool:
        return self.health == "SERVING"

    def dataset(self, name: str) -> NodeDataset | None:
        return next((d for d in self.datasets if d.name == name), None)

    def describe(self) -> str:
        """`name (address)`, or just the address when it is the name."""
        return self.address if self.name == self.address else f"{self.name} ({self.address})"


class ClusterView(BaseModel):
    """Every node: the answering daemon first, then its peers in configured order."""

    model_config = ConfigDict(frozen=True)

    nodes: list[NodeInfo]


class PushResult(BaseModel):
    """What `dataset push` did."""

    model_config = ConfigDict(frozen=True)

    node: str
    name: str
    version: str
    bytes: int
    seconds: float
    unchanged: bool = False
