"""The heterogeneous body of `GET /v1/status`: datasets and tiers, jobs and ranks, traffic, throughput.

Every figure is read from the daemon's metrics registry (the numbers /metrics exports) or
from its dataset registry and job table (the machine report and NVML's measured bytes come
from `graphtier.service.hardware`); `graphtier metrics` and the dashboard render it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.machine import MachineReport, MeasuredTraffic


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
        description="replicated, interleaved_local, interleaved_peer, host, storage, network."
    )
    links: dict[str, int] = Field(description="Bytes by link: local, nvlink, pcie, storage, network.")
    total_rows: int
    total_bytes: int
    device_bytes: int
    hit_ratio: float = Field(description="Bytes served by the device tiers / all bytes.")
    simulated: bool = Field(description="True when the device tiers are accounted, not real.")


class PeerStatus(_Model):
    """Rows, bytes and FetchRows calls fetched from one other node (partitioned features)."""

    peer: str = Field(description="The node's daemon, HOST:PORT.")
    rows: int
    bytes: int
    requests: int


class NetworkStatus(_Model):
    """The network tier: a partitioned job's rows fetched from the nodes that own them."""

    rows: int = 0
    bytes: int = 0
    requests: int = 0
    fetch_seconds: float = Field(0.0, description="FetchRows calls' latencies, summed.")
    wait_seconds: float = Field(0.0, description="Time gathers waited for rows not yet fetched (0: fetches hidden).")
    peers: list[PeerStatus] = Field(default_factory=list)


class StorageStatus(_Model):
    """How the storage tier's rows were served (read, or by the look-ahead window) and what reading cost."""

    mode: str = Field(description="mmap, direct or page-cache; 'mixed' over jobs that differ; '' with no producer yet.")
    window: int = Field(description="Look-ahead window depth in batches (the deepest, over several jobs); 0 = off.")
    read_rows: int = Field(description="Storage-tier rows read from the file.")
    read_bytes: int = Field(description="Bytes asked of the device: whole aligned requests (the rows' bytes for mmap).")
    read_row_bytes: int = Field(description="Bytes of the storage-tier rows read: read_rows x the row's bytes.")
    read_amplification: float = Field(
        description="read_bytes / read_row_bytes: device bytes per byte of the rows needed; 0 before any read."
    )
    requests: int
    window_rows: int = Field(
        description="Storage-tier rows the look-ahead window served (read once, for an earlier batch)."
    )
    window_bytes: int
    window_hit_ratio: float = Field(description="window_rows / (read_rows + window_rows).")
    io_seconds: float = Field(description="Time requests were in flight.")
    read_seconds: float = Field(description="Time in storage reads, all of it.")
    queue_depth: float = Field(description="Mean requests in flight while any was.")
    bandwidth: float = Field(description="read_bytes / io_seconds, bytes/s; 0 when not measured (mmap).")
    lookahead_batches: int = Field(description="Batches sampled ahead now (summed over ranks).")
    window_cached_rows: int = Field(description="Rows the windows hold now (summed over ranks).")


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
    owner: str = Field(default="", description="The user the job belongs to; empty for a job from before owners.")
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
    gpu_share: str = Field(
        default="", description="How the producers share the GPUs with the ranks (MPS or a capped grid) and why."
    )
    val_accuracy: float | None
    test_accuracy: float | None
    link_metrics: dict[str, float] = Field(
        default_factory=dict,
        description="A link-prediction job's latest evaluation: val_auc, test_mrr, test_hits@50, ...; empty otherwise.",
    )
    best: BestEvaluation | None = Field(
        default=None,
        description="The evaluation at the epoch of the best validation figure so far (val_accuracy, or a link "
        "job's val_hits@50; ties: the earlier epoch); None before one.",
    )
    traffic: TrafficStatus
    storage: StorageStatus
    network: NetworkStatus = Field(
        default_factory=NetworkStatus, description="Rows fetched from other nodes, per peer."
    )
    ranks: list[RankStatus]
    epochs_recorded: int = Field(
        default=0, description="Epochs in the job's history (its curves: /v1/jobs/{job_id}/history)."
    )
    artifact: str = Field(
        default="",
        description="Its exported model: 'kept', 'expired' (removed by the retention) or 'none'; '' before it ends.",
    )
    artifact_bytes: int = Field(default=0, description="Bytes of its kept exported model.")


class ArtifactsStatus(_Model):
    """The exported models the daemon keeps, and its retention policy for them."""

    keep_jobs: int = Field(default=0, description="The newest succeeded jobs whose models are kept (--artifact-keep).")
    budget_bytes: int | None = Field(
        default=None, description="Bytes the kept models may hold together (--artifact-budget); None = no limit."
    )
    policy: str = Field(default="", description="The policy in words.")
    kept_jobs: int = 0
    kept_bytes: int = 0
    expired_jobs: int = Field(default=0, description="Jobs whose models the retention removed.")


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
    storage: StorageStatus = Field(description="Every job's storage reads together.")
    network: NetworkStatus = Field(default_factory=NetworkStatus, description="Every job's network tier together.")
    batches_total: int
    batches_per_second: float = Field(description="Batches trained per second over every job, last 10 s (now).")
    produced_batches_per_second: float = Field(description="Batches produced per second over every job, last 10 s.")
    producer_lag_batches: int = Field(description="Largest lag over every running rank.")
    sample_seconds_total: float
    gather_seconds_total: float
    train_seconds_total: float
    machine: MachineReport = Field(description="What this machine offers the data path (`graphtier doctor`).")
    measured: MeasuredTraffic = Field(description="PCIe/NVLink bytes NVML measured, beside the accounted traffic.")
    artifacts: ArtifactsStatus = Field(
        default_factory=ArtifactsStatus, description="Exported models kept, and the retention policy."
    )
