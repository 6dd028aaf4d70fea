"""The typed body of `GET /v1/status`: datasets and tiers, jobs and ranks, traffic, throughput.

Every figure is read from the daemon's metrics registry (the numbers /metrics exports) or
from its dataset registry and job table (the machine report and NVML's measured bytes come
from `graphtier.service.hardware`); `graphtier metrics` and the dashboard render it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from graphtier.service.hardware.models import MachineReport, MeasuredTraffic


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceStatus(_Model):
    """Rows and bytes one traffic source served, and its share of all bytes."""

    rows: int
    bytes: int
    share: float = Field(description="bytes / all bytes; the per-tier hit ratio (0 when nothing was read).")


class TrafficStatus(_Model):
    """Feature traffic by source and by link, since the daemon started."""

    sources: dict[str, SourceStatus] = Field(
        description="replicated, interleaved_local, interleaved_peer, host, storage."
    )
    links: dict[str, int] = Field(description="Bytes by link: local, nvlink, pcie, storage.")
    total_rows: int
    total_bytes: int
    device_bytes: int
    hit_ratio: float = Field(description="Bytes served by the device tiers / all bytes.")
    simulated: bool = Field(description="True when the device tiers are accounted, not real.")


class TierStatus(_Model):
    """One tier of a loaded dataset: rows and bytes of one copy."""

    tier: str
    rows: int
    bytes: int


class DatasetStatus(_Model):
    """A loaded dataset and where its bytes are."""

    name: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    feature_bytes: int
    structure_bytes: int
    resident_bytes: int = Field(description="Shared-memory bytes the daemon holds for it.")
    num_devices: int
    device_bytes_per_device: int
    simulated_devices: bool
    tiers: list[TierStatus]
    job_ids: list[str]
    loaded_at: datetime


class RankStatus(_Model):
    """One rank of a job: its trainer's and producer's latest figures."""

    rank: int
    trainer_pid: int
    producer_pid: int
    phase: str
    epoch: int
    global_step: int
    loss: float | None
    accuracy: float | None
    batches_trained: int
    batches_produced: int
    producer_lag_batches: int
    ready_slots: int
    sample_seconds: float
    gather_seconds: float
    train_seconds: float
    data_wait_seconds: float
    last_report: datetime | None


class JobStatus(_Model):
    """One job: state, throughput, traffic and ranks."""

    job_id: str
    name: str
    dataset: str
    state: str
    message: str
    world_size: int
    created_at: datetime
    finished_at: datetime | None
    cancel_requested: bool
    batches_total: int
    batches_per_second: float = Field(
        description="Batches trained per second by all ranks together: last 10 s while running, whole run once ended."
    )
    produced_batches_per_second: float = Field(description="Batches produced per second, measured the same way.")
    producer_lag_batches: int = Field(description="Largest lag over the job's ranks.")
    val_accuracy: float | None
    test_accuracy: float | None
    traffic: TrafficStatus
    ranks: list[RankStatus]


class EndpointsStatus(_Model):
    """Where the daemon listens."""

    grpc_unix: str
    grpc_tcp: str | None
    http_url: str
    tcp_security: str | None = Field(
        default=None, description="'tls+token', or 'plaintext+token (insecure)' (warned); None without TCP."
    )


class DaemonStatus(_Model):
    """Everything `/v1/status` returns."""

    version: str
    pid: int
    started_at: datetime
    time: datetime
    uptime_seconds: float
    endpoints: EndpointsStatus
    dataset_root: str
    simulated_devices: bool
    datasets: list[DatasetStatus]
    jobs: list[JobStatus]
    traffic: TrafficStatus
    batches_total: int
    batches_per_second: float = Field(description="Batches trained per second over every job, last 10 s (now).")
    produced_batches_per_second: float = Field(description="Batches produced per second over every job, last 10 s.")
    producer_lag_batches: int = Field(description="Largest lag over every running rank.")
    sample_seconds_total: float
    gather_seconds_total: float
    train_seconds_total: float
    machine: MachineReport = Field(description="What this machine offers the data path (`graphtier doctor`).")
    measured: MeasuredTraffic = Field(description="PCIe/NVLink bytes NVML measured, beside the accounted traffic.")
