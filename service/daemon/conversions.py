"""Conversions between `graphtier.v1` messages and the daemon's domain types.

The only module (with the servicers and the client that call it) that touches `_pb2`
types: everything else works on pydantic models and dataclasses. Each message mirrors its
domain type field for field, so every conversion is a plain copy.
"""

from __future__ import annotations

from datetime import datetime, timezone

from google.protobuf.timestamp_pb2 import Timestamp

from graphtier.service.daemon.errors import InvalidReportError
from graphtier.service.daemon.models import BudgetSpec, DatasetLayoutInfo, DatasetSummary, TierBytes
from graphtier.service.daemon.progress import Phase, ProducerFigures, ProgressReport, TrainerFigures
from graphtier.service.gather.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.service.placement import PlacementPlan
from graphtier.service.shm import SegmentRef
from graphtier.service.store import DeviceTierRef, SharedDatasetHandle, StorageTierRef
from graphtier.v1 import common_pb2, datasets_pb2, progress_pb2

# Time


def timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc))
    return stamp


def from_timestamp(stamp: Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=timezone.utc)


# Segments, storage, budgets, boundaries


def segment_ref_to_proto(ref: SegmentRef) -> common_pb2.SegmentRef:
    return common_pb2.SegmentRef(name=ref.name, offset=ref.offset, shape=list(ref.shape), dtype=ref.dtype)


def segment_ref_from_proto(message: common_pb2.SegmentRef) -> SegmentRef:
    return SegmentRef(name=message.name, offset=message.offset, shape=tuple(message.shape), dtype=message.dtype)


def storage_ref_to_proto(ref: StorageTierRef) -> common_pb2.StorageTierRef:
    return common_pb2.StorageTierRef(
        path=ref.path, offset_bytes=ref.offset_bytes, first_row=ref.first_row, rows=ref.rows,
        row_shape=list(ref.row_shape), dtype=ref.dtype,
    )  # fmt: skip


def storage_ref_from_proto(message: common_pb2.StorageTierRef) -> StorageTierRef:
    return StorageTierRef(
        path=message.path, offset_bytes=message.offset_bytes, first_row=message.first_row, rows=message.rows,
        row_shape=tuple(message.row_shape), dtype=message.dtype,
    )  # fmt: skip


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


def plan_to_proto(plan: PlacementPlan) -> common_pb2.PlacementBoundaries:
    return common_pb2.PlacementBoundaries(**plan.model_dump())


def plan_from_proto(message: common_pb2.PlacementBoundaries) -> PlacementPlan:
    return PlacementPlan(**{name: getattr(message, name) for name in PlacementPlan.model_fields})


def tier_to_proto(name: str) -> int:
    return common_pb2.Tier.Value(f"TIER_{name.upper()}")


def tier_from_proto(value: int) -> str:
    return common_pb2.Tier.Name(value).removeprefix("TIER_").lower()


# Datasets


def layout_to_proto(layout: DatasetLayoutInfo) -> datasets_pb2.DatasetLayout:
    handle = layout.handle
    message = datasets_pb2.DatasetLayout(
        dataset=handle.dataset,
        boundaries=plan_to_proto(handle.plan),
        colptr=segment_ref_to_proto(handle.colptr),
        row=segment_ref_to_proto(handle.row),
        splits={name: segment_ref_to_proto(ref) for name, ref in handle.splits.items()},
        tier_sizes=[common_pb2.TierSize(tier=tier_to_proto(t.tier), rows=t.rows, bytes=t.bytes)
                    for t in layout.tier_sizes],
        num_edges=layout.num_edges,
        feature_dim=layout.feature_dim,
        num_classes=layout.num_classes,
        feature_bytes=layout.feature_bytes,
        structure_bytes=layout.structure_bytes,
        device_bytes_per_device=layout.device_bytes_per_device,
        simulated_devices=layout.simulated_devices,
        owner_pid=layout.owner_pid,
        loaded_at=timestamp(layout.loaded_at),
        budgets=budgets_to_proto(layout.budgets),
    )  # fmt: skip
    message.device_tiers.extend(common_pb2.DeviceTierRef(**ref.model_dump()) for ref in handle.device_tiers)
    message.placement_notes.extend(handle.placement_notes)
    if handle.labels is not None:
        message.labels.CopyFrom(segment_ref_to_proto(handle.labels))
    if handle.resident_features is not None:
        message.resident_features.CopyFrom(segment_ref_to_proto(handle.resident_features))
    if handle.storage_features is not None:
        message.storage_features.CopyFrom(storage_ref_to_proto(handle.storage_features))
    return message


def layout_from_proto(message: datasets_pb2.DatasetLayout) -> DatasetLayoutInfo:
    handle = SharedDatasetHandle(
        dataset=message.dataset,
        plan=plan_from_proto(message.boundaries),
        colptr=segment_ref_from_proto(message.colptr),
        row=segment_ref_from_proto(message.row),
        labels=segment_ref_from_proto(message.labels) if message.HasField("labels") else None,
        splits={name: segment_ref_from_proto(ref) for name, ref in message.splits.items()},
        resident_features=(
            segment_ref_from_proto(message.resident_features) if message.HasField("resident_features") else None
        ),
        storage_features=(
            storage_ref_from_proto(message.storage_features) if message.HasField("storage_features") else None
        ),
        device_tiers=tuple(
            DeviceTierRef(**{name: getattr(ref, name) for name in DeviceTierRef.model_fields})
            for ref in message.device_tiers
        ),
        placement_notes=tuple(message.placement_notes),
    )
    return DatasetLayoutInfo(
        handle=handle,
        tier_sizes=[TierBytes(tier=tier_from_proto(t.tier), rows=t.rows, bytes=t.bytes) for t in message.tier_sizes],
        num_edges=message.num_edges,
        feature_dim=message.feature_dim,
        num_classes=message.num_classes,
        feature_bytes=message.feature_bytes,
        structure_bytes=message.structure_bytes,
        device_bytes_per_device=message.device_bytes_per_device,
        simulated_devices=message.simulated_devices,
        owner_pid=message.owner_pid,
        loaded_at=from_timestamp(message.loaded_at),
        budgets=budgets_from_proto(message.budgets),
    )


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
