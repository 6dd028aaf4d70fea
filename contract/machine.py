"""What the machine offers the data path (`MachineReport`) and what NVML measured (`MeasuredTraffic`).

Plain pydantic models, no torch or NVML import, so a client can parse `/v1/status` cheaply;
`graphtier.service.hardware` runs the checks and fills them in.
Every check has a status and a one-line reason: `ok` (usable), `unavailable` (absent,
unsupported or not permitted here), `failed` (present but the check itself errored), and
`pending` (the daemon's CUDA probe subprocess has not answered yet).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CheckStatus = Literal["ok", "unavailable", "failed", "pending"]
CHECK_NAMES: tuple[str, ...] = (
    "cuda_devices",
    "host_register",
    "peer_access",
    "nvlink",
    "mps",
    "nvml_pcie_counters",
    "nvml_nvlink_counters",
    "transparent_hugepages",
    "dev_shm",
)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckResult(_Model):
    """One fact about the machine, checked rather than assumed."""

    name: str
    status: CheckStatus
    reason: str = Field(description="One line: what was found, or why the check could not pass.")
    details: dict[str, Any] = Field(default_factory=dict, description="The values read (JSON types).")


class GpuDevice(_Model):
    """One GPU as NVML (and, where CUDA was initialised, torch) sees it."""

    index: int = Field(description="NVML index (PCI order; not affected by CUDA_VISIBLE_DEVICES).")
    cuda_index: int | None = Field(description="This process's CUDA ordinal, None when not visible or not probed.")
    name: str
    uuid: str
    pci_bus_id: str
    total_memory_bytes: int
    free_memory_bytes: int
    compute_capability: str | None
    sm_count: int | None = Field(description="Streaming multiprocessors; needs CUDA, so None until probed.")


class MachineReport(_Model):
    """`graphtier doctor`'s report; the daemon computes it once at start and serves it in /v1/status."""

    hostname: str
    checked_at: datetime
    cuda: bool = Field(description="True when at least one CUDA device is usable by this install.")
    summary: str = Field(description="One line: can device tiers be placed here, and if not, why.")
    driver_version: str | None
    cuda_driver_version: str | None
    torch_version: str
    torch_cuda_version: str | None = Field(description="CUDA version torch was built with; None = CPU build.")
    devices: list[GpuDevice]
    peer_access: list[list[bool]] | None = Field(
        default=None, description="[i][j]: CUDA device i can access device j's memory (CUDA ordinals)."
    )
    checks: list[CheckResult]

    def check(self, name: str) -> CheckResult:
        """The check called `name` (KeyError naming the known ones otherwise)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check {name!r}; the report has {[c.name for c in self.checks]}")


class LinkTraffic(_Model):
    """Bytes NVML counted on one NVLink link since the collector started."""

    link: int
    tx_bytes: int
    rx_bytes: int


class GpuTraffic(_Model):
    """Bytes NVML counted on one GPU's PCIe and NVLink links since the collector started."""

    gpu: int = Field(description="NVML index.")
    name: str
    method: Literal["field_values", "throughput"] | None = Field(
        description="field_values: the driver's cumulative byte counters (exact); throughput: KB/s samples "
        "integrated over the interval (an estimate); None: PCIe bytes are not measured."
    )
    pcie_tx_bytes: int | None
    pcie_rx_bytes: int | None = Field(description="Host to device: what host-tier reads cost.")
    unavailable_reason: str | None = Field(description="Why PCIe bytes are not measured, when they are not.")
    nvlink: list[LinkTraffic]
    nvlink_unavailable_reason: str | None


class MeasuredTraffic(_Model):
    """The NVML collector's state: per GPU byte totals, or why there are none."""

    enabled: bool
    interval_s: float
    reason: str | None = Field(description="Why nothing is measured at all (NVML missing, disabled, no GPU).")
    samples: int
    last_sample_at: datetime | None
    gpus: list[GpuTraffic]

    @property
    def pcie_rx_bytes(self) -> int | None:
        """Host-to-device bytes over every measured GPU; None when none is measured."""
        measured = [g.pcie_rx_bytes for g in self.gpus if g.pcie_rx_bytes is not None]
        return sum(measured) if measured else None
