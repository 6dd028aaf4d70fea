"""What the daemon tells about a job: `JobInfo` (GetJob/ListJobs) and `JobEvent` (StreamJobEvents).

Plain frozen dataclasses mirroring `jobs.proto`; `jobs/conversions.py` copies them to and
from the wire. The job manager builds them from the job table, the progress tracker and
its own supervision records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import TrafficCounts


@dataclass(frozen=True)
class JobProgressInfo:
    """Progress summed or averaged over a job's ranks."""

    epoch: int = 0
    step_in_epoch: int = 0
    steps_per_epoch: int = 0
    global_step: int = 0
    total_steps: int = 0
    loss: float = 0.0
    train_accuracy: float = 0.0
    batches_per_second: float = 0.0
    traffic: TrafficCounts = field(default_factory=TrafficCounts)
    storage: StorageCounters = field(default_factory=StorageCounters)  # how the producers' storage rows were served


@dataclass(frozen=True)
class JobResultInfo:
    """Final figures of a job that succeeded (reported by rank 0): the last epoch's, and `best`, those at the
    epoch of the best validation figure (None when no evaluation had one)."""

    val_accuracy: float = 0.0
    test_accuracy: float = 0.0
    final_loss: float = 0.0
    train_seconds: float = 0.0
    checkpoint_path: str = ""
    metrics: dict[str, float] = field(default_factory=dict)  # a link job's val_auc, test_mrr, test_hits@50, ...
    best: BestEvaluation | None = None


@dataclass(frozen=True)
class JobArtifactInfo:
    """A job's exported model as the daemon keeps it (`contract.jobs.artifact` is its format)."""

    state: str  # "kept" (export it), "expired" (removed by the artifact retention) or "none" (nothing to keep)
    message: str = ""  # what was kept, or why there is none
    bytes: int = 0
    path: str = ""  # its directory on the daemon's machine


@dataclass(frozen=True)
class RankInfo:
    """One rank: its trainer and producer processes and how far it got."""

    rank: int
    trainer_pid: int = 0
    producer_pid: int = 0
    global_step: int = 0
    batches_per_second: float = 0.0
    ready_slots: int = 0
    last_report: datetime | None = None


class JobPlacementInfo(BaseModel):
    """Where one node's part of a multi-node job stands in the job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nnodes: int = Field(ge=2, le=1024)
    node_rank: int = Field(ge=0)
    rdzv_endpoint: str = Field(min_length=3)
    rdzv_id: str = Field(min_length=1, max_length=200)
    coordinator: str = Field(min_length=3, description="HOST:PORT of the coordinating daemon (node rank 0).")
    coordinator_job_id: str = Field(min_length=1)
    local_addr: str = Field(
        min_length=1, description="Address this node's ranks are reached at (torchrun --local-addr)."
    )
    dataset_version: str = ""
    peer_timeout_s: float = Field(default=15.0, gt=0, le=3600)
    node_addresses: list[str] = Field(
        default_factory=list,
        max_length=1024,
        description="Every node's daemon HOST:PORT by node rank (partitioned features).",
    )

    @property
    def rdzv_host(self) -> bool:
        """True on node rank 0 (the coordinator), whose torchrun agent hosts the rendezvous store."""
        return self.node_rank == 0


@dataclass(frozen=True)
class JobNodeInfo:
    """One node's part of a multi-node job, as the coordinating daemon last saw it."""

    node: str
    address: str
    node_rank: int
    job_id: str = ""
    state: JobState = JobState.PENDING
    message: str = ""
    progress: JobProgressInfo | None = None
    ranks: list[RankInfo] = field(default_factory=list)
    log_path: str = ""


@dataclass(frozen=True)
class JobInfo:
    """A job as GetJob returns it."""

    job_id: str
    spec: JobSpec
    state: JobState
    message: str
    created_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    progress: JobProgressInfo | None = None
    result: JobResultInfo | None = None
    ranks: list[RankInfo] = field(default_factory=list)
    exit_code: int | None = None
    restarts: int = 0
    log_path: str = ""
    notes: list[str] = field(default_factory=list)  # advice noticed at submit (jobs.proto Job.notes)
    placement: JobPlacementInfo | None = None  # a part of a multi-node job: where it stands in the job
    nodes: list[JobNodeInfo] = field(default_factory=list)  # on the coordinating daemon: every node's part
    gpu_share: str = ""  # how the producers share the GPUs and why (jobs.proto Job.gpu_share)
    history: list[EpochRecord] = field(default_factory=list)  # every epoch's record so far, in order
    artifact: JobArtifactInfo | None = None  # its exported model, once the job has ended
    dataset_version: str = ""  # the version of the dataset copy it trains on
    owner: JobOwner | None = None  # the user the job belongs to; None for a job kept from before owners


@dataclass(frozen=True)
class StateChange:
    previous: JobState
    current: JobState
    message: str = ""
    result: JobResultInfo | None = None


@dataclass(frozen=True)
class LogLine:
    text: str
    rank: int | None = None
    from_producer: bool = False
    stream: str = "stdout"  # "stdout" or "stderr"


@dataclass(frozen=True)
class JobEvent:
    """One entry of a job's event log; exactly one of the payloads is set."""

    sequence: int
    time: datetime
    job_id: str
    state_change: StateChange | None = None
    progress: JobProgressInfo | None = None
    log: LogLine | None = None
