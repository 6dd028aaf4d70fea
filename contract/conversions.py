"""Conversions between `graphtier.v1` messages and the contract's types: time, budgets, tier
names, dataset summaries, traffic and storage counters and progress reports.

With `jobs/conversions.py`, `cluster/conversions.py` and `layouts.py` (the handles a rank
attaches to), the only modules that touch `_pb2` types besides the servicers and clients
that call them: everything else works on pydantic models and dataclasses. Each message
mirrors its type field for field, so every conversion is a plain copy.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone

from google.protobuf.timestamp_pb2 import Timestamp

from graphtier.contract.errors import InvalidReportError
from graphtier.contract.datasets import BudgetSpec, DatasetSummary
from graphtier.contract.jobs.progress import Phase, ProducerFigures, ProgressReport, TrainerFigures
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.v1 import common_pb2, datasets_pb2, progress_pb2

# Time


def timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc))
    return stamp


def from_timestamp(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=timezone.utc)


# Budgets and tier names


def budgets_to_proto(budgets: BudgetSpec) -> common_pb2.TierBudgetSpec:
    message = common_pb2.TierBudgetSpec(
        num_devices=budgets.num_devices,
        device_replicated=budgets.device_replicated,
        device_interleaved=budgets.device_interleaved,
        structure_device=budgets.structure_device,
    )
    if budgets.host is not None:
        message.host = budgets.host
    return message


def budgets_from_proto(message: common_pb2.TierBudgetSpec) -> BudgetSpec:
    return BudgetSpec(
        num_devices=message.num_devices,
        device_replicated=message.device_replicated,
        device_interleaved=message.device_interleaved,
        host=message.host if message.HasField("host") else None,
        structure_device=message.structure_device,
    )


def tier_to_proto(name: str) -> int:
    return common_pb2.Tier.Value(f"TIER_{name.upper()}")


def tier_from_proto(value: int) -> str:
    return common_pb2.Tier.Name(value).removeprefix("TIER_").lower()


# Datasets


def summary_to_proto(summary: DatasetSummary) -> datasets_pb2.DatasetSummary:
    return datasets_pb2.DatasetSummary(**summary.model_dump())


def summary_from_proto(message: datasets_pb2.DatasetSummary) -> DatasetSummary:
    return DatasetSummary(**{name: getattr(message, name) for name in DatasetSummary.model_fields})


# Progress


def traffic_to_proto(traffic: TrafficCounts) -> common_pb2.TierCounters:
    per = {
        source: common_pb2.SourceTraffic(rows=getattr(traffic, source).rows, bytes=getattr(traffic, source).bytes)
        for source in SOURCES
    }
    return common_pb2.TierCounters(**per, simulated=traffic.simulated)


def traffic_from_proto(message: common_pb2.TierCounters) -> TrafficCounts:
    per = {source: SourceTraffic(getattr(message, source).rows, getattr(message, source).bytes) for source in SOURCES}
    return TrafficCounts(**per, simulated=message.simulated)


def storage_to_proto(counters: StorageCounters) -> common_pb2.StorageCounters:
    return common_pb2.StorageCounters(**asdict(counters))


def storage_from_proto(message: common_pb2.StorageCounters) -> StorageCounters:
    """The counters; an unset message (a sender that does not report them) reads as none in the default mode."""
    values = {name: getattr(message, name) for name in StorageCounters.__dataclass_fields__}
    return StorageCounters(**{**values, "mode": message.mode or StorageCounters.mode})


_TRAINER_SCALARS = (
    "epoch", "step_in_epoch", "global_step", "loss", "accuracy", "batches_per_second",
    "data_wait_seconds_total", "train_seconds_total", "steps_total", "model_bytes",
)  # fmt: skip
_PRODUCER_SCALARS = (
    "epoch", "batches_total", "seeds_total", "sampled_nodes_total", "sampled_edges_total", "sample_seconds_total",
    "gather_seconds_total", "wait_seconds_total", "ready_slots", "lag_batches", "slot_grows_total",
)  # fmt: skip


def report_to_proto(report: ProgressReport) -> progress_pb2.ProgressReport:
    message = progress_pb2.ProgressReport(
        job_id=report.job_id, rank=report.rank, pid=report.pid, time=timestamp(report.time)
    )
    figures = report.figures
    if isinstance(figures, TrainerFigures):
        message.reporter = progress_pb2.REPORTER_TRAINER
        trainer = message.trainer
        for name in _TRAINER_SCALARS:
            setattr(trainer, name, getattr(figures, name))
        trainer.phase = progress_pb2.Phase.Value(f"PHASE_{figures.phase.name}")
        for name in ("val_accuracy", "test_accuracy"):
            if getattr(figures, name) is not None:
                setattr(trainer, name, getattr(figures, name))
    else:
        message.reporter = progress_pb2.REPORTER_PRODUCER
        producer = message.producer
        for name in _PRODUCER_SCALARS:
            setattr(producer, name, getattr(figures, name))
        producer.traffic.CopyFrom(traffic_to_proto(figures.traffic))
    return message


def report_from_proto(message: progress_pb2.ProgressReport) -> ProgressReport:
    """The domain report; InvalidReportError when the reporter is unset or its figures do not match it."""
    expected = {progress_pb2.REPORTER_TRAINER: "trainer", progress_pb2.REPORTER_PRODUCER: "producer"}
    kind = expected.get(message.reporter)
    if kind is None:
        raise InvalidReportError(f"report from pid {message.pid} for job {message.job_id!r} names no reporter kind")
    if message.WhichOneof("figures") != kind:
        raise InvalidReportError(
            f"report for job {message.job_id!r} rank {message.rank} is from a {kind} but carries "
            f"{message.WhichOneof('figures') or 'no'} figures"
        )
    figures: TrainerFigures | ProducerFigures
    if kind == "trainer":
        trainer = message.trainer
        figures = TrainerFigures(
            phase=Phase[progress_pb2.Phase.Name(trainer.phase).removeprefix("PHASE_")],
            val_accuracy=trainer.val_accuracy if trainer.HasField("val_accuracy") else None,
            test_accuracy=trainer.test_accuracy if trainer.HasField("test_accuracy") else None,
            **{name: getattr(trainer, name) for name in _TRAINER_SCALARS},
        )
    else:
        producer = message.producer
        figures = ProducerFigures(
            traffic=traffic_from_proto(producer.traffic),
            **{name: getattr(producer, name) for name in _PRODUCER_SCALARS},
        )
    moment = from_timestamp(message.time) if message.HasField("time") else datetime.now(timezone.utc)
    return ProgressReport(job_id=message.job_id, rank=message.rank, pid=message.pid, time=moment, figures=figures)
