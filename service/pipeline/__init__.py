"""The producer channel: ping-pong slots in shared memory between a producer and a trainer rank.

A producer process (`python -m graphtier.service.pipeline.producer`, or `spawn_producer`)
samples one rank's batches, gathers their features from the tiers straight into a FREE
slot and publishes "slot k holds batch n" over a Unix socket; the rank's `ChannelReader`
hands the slot out as a `Batch` of zero-copy views and releases it after the step. The
`ChannelLayout` (JSON) says where everything lives; the control block carries state,
heartbeat and counters for the daemon to export.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.config import ProducerConfig
from graphtier.service.pipeline.control import ChannelStats, ControlBlock, ProducerStatus, SlotState
from graphtier.service.pipeline.errors import (
    ChannelError,
    ProducerDiedError,
    ProducerError,
    ProducerFailedError,
    ProducerStalledError,
)
from graphtier.service.pipeline.launch import ProducerProcess, spawn_producer
from graphtier.service.pipeline.layout import ChannelLayout, SlotCapacity, SlotLayout
from graphtier.service.pipeline.reader import ChannelReader
from graphtier.service.pipeline.slots import attach_control

if TYPE_CHECKING:
    from graphtier.service.pipeline.producer import Producer

__all__ = [
    "Batch",
    "ChannelError",
    "ChannelLayout",
    "ChannelReader",
    "ChannelStats",
    "ControlBlock",
    "Producer",
    "ProducerConfig",
    "ProducerDiedError",
    "ProducerError",
    "ProducerFailedError",
    "ProducerProcess",
    "ProducerStalledError",
    "ProducerStatus",
    "SlotCapacity",
    "SlotLayout",
    "SlotState",
    "attach_control",
    "spawn_producer",
]


def __getattr__(name: str) -> Any:
    # Imported on first use so `python -m graphtier.service.pipeline.producer` does not find
    # its own module already imported by the package (runpy warns about that).
    if name == "Producer":
        from graphtier.service.pipeline.producer import Producer

        return Producer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
