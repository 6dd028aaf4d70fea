"""What a trainer rank or its producer reports (ReportProgress): cumulative figures, so a lost report loses nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.network import NetworkCounters
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import TrafficCounts


class Phase(str, Enum):
    """What a trainer rank is doing."""

    UNSPECIFIED = "unspecified"
    TRAIN = "train"
    EVAL = "eval"
    DONE = "done"
    INFER = "infer"  # layer-wise inference: the epoch is the layer, a step a chunk of its destinations


@dataclass(frozen=True)
class TrainerFigures:
    """Figures only a trainer rank knows; `*_total` fields are cumulative since it started."""

    phase: Phase = Phase.UNSPECIFIED
    epoch: int = 0
    step_in_epoch: int = 0
    global_step: int = 0
    loss: float = 0.0
    accuracy: float = 0.0
    batches_per_second: float = 0.0
    data_wait_seconds_total: float = 0.0
    train_seconds_total: float = 0.0
    steps_total: int = 0
    val_accuracy: float | None = None
    test_accuracy: float | None = None
    model_bytes: int = 0
    eval_metrics: dict[str, float] = field(default_factory=dict)  # a link job's latest val_auc, test_mrr, ...
    best: BestEvaluation | None = None  # the evaluation at the best validation figure so far
    last_epoch: EpochRecord | None = None  # the latest epoch's record (job-wide figures), repeated until the next
    steps_per_epoch: int = 0  # the current epoch's steps when the rank decides them (inference); 0: the producer's
    total_steps: int = 0  # the whole job's steps when the rank decides them (inference); 0: from the producer's


@dataclass(frozen=True)
class ProducerFigures:
    """Figures only a producer knows; `*_total` fields, `traffic` and `storage`'s counters are cumulative
    since it started."""

    epoch: int = 0
    batches_total: int = 0
    seeds_total: int = 0
    sampled_nodes_total: int = 0
    sampled_edges_total: int = 0
    sample_seconds_total: float = 0.0
    gather_seconds_total: float = 0.0
    wait_seconds_total: float = 0.0
    traffic: TrafficCounts = field(default_factory=TrafficCounts)
    ready_slots: int = 0
    lag_batches: int = 0
    slot_grows_total: int = 0
    storage: StorageCounters = field(default_factory=StorageCounters)  # how its storage-tier rows were served
    network: NetworkCounters = field(default_factory=NetworkCounters)  # rows fetched from each peer (partitioned)


@dataclass(frozen=True)
class ProgressReport:
    """One report from a trainer rank or its producer."""

    job_id: str
    rank: int
    pid: int
    time: datetime
    figures: TrainerFigures | ProducerFigures

    @property
    def reporter(self) -> str:
        return "trainer" if isinstance(self.figures, TrainerFigures) else "producer"
