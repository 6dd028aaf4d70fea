"""Domain types the daemon hands out about datasets; the gRPC messages mirror them.

Servicers and the client convert between these and `graphtier.v1` messages at the
boundary (`conversions.py`); nothing else sees a `_pb2` type.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.options import Flag

TIER_NAMES: tuple[str, ...] = (
    "device_replicated",
    "device_interleaved",
    "host",
    "storage",
    "structure_device",
    "structure_host",
)


class BudgetSpec(BaseModel):
    """Tier budgets as a user typed them ("10%", "512MiB", "4096"; "" = 0); parsed per dataset.

    The default (no devices, `host` unset) keeps every feature row in host shared memory.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_devices: int = Field(
        default=0, ge=0, le=1024, description="Devices the device tiers span (may be accounted); 0 = every row on host."
    )
    device_replicated: str = Field(
        default="", description="Feature bytes on every device: a share of the rows' bytes (5%) or a size (512MiB)."
    )
    device_interleaved: str = Field(default="", description="Feature bytes interleaved over the devices, in total.")
    host: Annotated[str | None, Flag("--host-budget")] = Field(
        default=None, description="Feature bytes in host memory; unset = all the rest."
    )
    structure_device: str = Field(
        default="",
        description="Structure bytes (CSC lists of the hottest nodes) on every device: a share (10%) or a size "
        "(256MiB).",
    )


class TierBytes(BaseModel):
    """Rows and bytes (one copy) of one tier."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: str = Field(description="One of TIER_NAMES.")
    rows: int = Field(ge=0)
    bytes: int = Field(ge=0)


class DatasetSummary(BaseModel):
    """One prepared or loaded dataset, as ListDatasets returns it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    loaded: bool
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    feature_bytes: int
    structure_bytes: int
    resident_bytes: int = Field(description="Shared-memory bytes the loaded dataset holds; 0 when not loaded.")
    job_ids: list[str] = Field(default_factory=list)
    source: str = ""


class UnloadResult(BaseModel):
    """What UnloadDataset returns."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    released_bytes: int
    cancelled_job_ids: list[str] = Field(default_factory=list)
