"""`ChannelLayout`: where a producer channel's slots and control block live in shared memory.

The producer builds it once its segments exist and the daemon hands it to the trainer rank
(as JSON, over gRPC); the rank attaches every slot from it without copying. A slot that
grows gets a new segment and a bumped `generation`; the producer sends the new
`SlotLayout` with the first batch written into it.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.shm import SegmentRef

LAYOUT_VERSION = 1
CHANNEL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")
LAYOUT_FILE = "layout.json"
SOCKET_FILE = "producer.sock"


def check_channel_name(name: str) -> str:
    """`name` if it can label segments and files (letters, digits, '_', '-'; 1-40 chars)."""
    if not CHANNEL_NAME_RE.fullmatch(name):
        raise ValueError(f"channel name {name!r} must be 1-40 letters, digits, '_' or '-'")
    return name


class SlotCapacity(BaseModel):
    """How much one slot holds: sampled nodes, sampled edges, and expanded (destination) nodes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: int = Field(ge=1, description="Rows of node_ids and features.")
    edges: int = Field(ge=1, description="Entries of indices (sampled edges).")
    expanded: int = Field(ge=1, description="Destination nodes; indptr has expanded + 1 entries.")

    def fits(self, needed: SlotCapacity) -> bool:
        return needed.nodes <= self.nodes and needed.edges <= self.edges and needed.expanded <= self.expanded


class SlotLayout(BaseModel):
    """One slot's regions, all inside one segment; sizes are capacities, not the batch's sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    generation: int = Field(ge=0, description="Bumped each time the slot is re-created larger.")
    capacity: SlotCapacity
    node_ids: SegmentRef = Field(description="int64 [capacity.nodes]: global ids, seeds first.")
    indptr: SegmentRef = Field(description="int64 [capacity.expanded + 1]: CSC offsets over local ids.")
    indices: SegmentRef = Field(description="int64 [capacity.edges]: source local ids.")
    labels: SegmentRef = Field(
        description="int64 [seeds]: labels of the seeds (-1 when unlabelled); seeds = batch_size but for "
        "link prediction (every endpoint of a batch's pairs)."
    )
    features: SegmentRef | None = Field(description="[capacity.nodes, *row_shape]; None for a featureless dataset.")
    pairs: SegmentRef | None = Field(
        default=None, description="int64 [pairs, 2]: a link-prediction batch's pairs over seed local ids; else None."
    )


class ChannelLayout(BaseModel):
    """Everything a consumer needs to attach a producer channel; names and offsets only."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(default=LAYOUT_VERSION, description="Layout format version.")
    channel: str = Field(description="Channel name; labels the producer's segments.")
    dataset: str
    producer_pid: int = Field(ge=1)
    producer_start_time: int = Field(ge=0, description="Producer start time (clock ticks since boot), pid-reuse safe.")
    socket_path: str = Field(description="Unix SEQPACKET socket the consumer connects to.")
    control: SegmentRef = Field(description="int64 control block (see control.py).")
    error_text: SegmentRef = Field(description="uint8 buffer holding the producer's error message, if any.")
    rank: int = Field(ge=0)
    world_size: int = Field(ge=1)
    fanouts: list[int]
    batch_size: int = Field(ge=1)
    epochs: int = Field(ge=1)
    steps_per_epoch: int = Field(ge=1)
    num_nodes: int = Field(ge=1)
    slots: list[SlotLayout] = Field(min_length=2)

    @field_validator("channel")
    @classmethod
    def _check_channel(cls, name: str) -> str:
        return check_channel_name(name)

    @field_validator("version")
    @classmethod
    def _check_version(cls, version: int) -> int:
        if version != LAYOUT_VERSION:
            raise ValueError(f"channel layout version {version} is not supported (expected {LAYOUT_VERSION})")
        return version

    @property
    def num_slots(self) -> int:
        return len(self.slots)

    @classmethod
    def read(cls, channel_dir: str | Path) -> ChannelLayout:
        """The layout a producer wrote into `channel_dir`; ChannelError when absent or malformed."""
        path = Path(channel_dir) / LAYOUT_FILE
        try:
            return cls.model_validate_json(path.read_text())
        except OSError as exc:
            raise ChannelError(f"{path}: cannot read the channel layout ({exc.strerror})") from None
        except ValidationError as exc:
            raise ChannelError(f"{path}: not a valid channel layout: {exc}") from None
