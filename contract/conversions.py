"""Conversions between `graphtier.v1` messages and the contract's types: time, budgets, tier
names, dataset summaries, traffic and storage counters.

With `jobs/conversions.py` (jobs and progress reports), `cluster/conversions.py` and the data
plane's wire modules (the handles a rank attaches to), the only modules that touch `_pb2` types
besides the servicers and clients that call them: everything else works on pydantic models and dataclasses. Each message
mirrors its type field for field, so every conversion is a plain copy.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone

from google.protobuf.timestamp_pb2 import Timestamp

from graphtier.contract.datasets import BudgetSpec, DatasetSummary
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.v1 import common_pb2, datasets_pb2

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


def tier_to_proto(name: str) -> common_pb2.Tier:
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
