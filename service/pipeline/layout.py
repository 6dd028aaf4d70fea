"""`ChannelLayout`: where a producer channel's slots and control block live in shared memory.

The producer builds it once its slots exist and the daemon hands it to the trainer rank
(as JSON, over gRPC); the rank opens every slot's memory handle from it without copying. A
slot that grows gets a new allocation and a bumped `generation`; the producer sends the new
`SlotLayout` with the first batch written into it. Device slots carry the interprocess CUDA
events that order the producer's writes and the rank's reads (ordering.py).
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from graphtier.service.memory import MemoryHandle, Region
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.shm import SegmentRef

LAYOUT_VERSION = 2
CHANNEL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,40}")
LAYOUT_FILE = "layout.json"
SOCKET_FILE = "producer.sock"
MEMORY_SOCKET_FILE = "memory.sock"  # where a producer passes the fds of its VMM device slots


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
    """One slot's regions, all inside one allocation; sizes are capacities, not the batch's sizes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0)
    generation: int = Field(ge=0, description="Bumped each time the slot is re-created larger.")
    capacity: SlotCapacity
    memory: MemoryHandle = Field(description="The slot's allocation: host shared memory or the rank's GPU.")
    node_ids: Region = Field(description="int64 [capacity.nodes]: global ids, seeds first.")
    indptr: Region = Field(description="int64 [capacity.expanded + 1]: CSC offsets over local ids.")
    indices: Region = Field(description="int64 [capacity.edges]: source local ids.")
    labels: Region = Field(
        description="int64 [seeds]: labels of the seeds (-1 when unlabelled); seeds = batch_size but for "
        "link prediction (every endpoint of a batch's pairs)."
    )
    features: Region | None = Field(description="[capacity.nodes, *row_shape]; None for a featureless dataset.")
    pairs: Region | None = Field(
        default=None, description="int64 [pairs, 2]: a link-prediction batch's pairs over seed local ids; else None."
    )
    edge_types: Region | None = Field(
        default=None, description="Heterogeneous batches: int64 [capacity.edges], the relation id of each sampled edge."
    )
    node_types: Region | None = Field(
        default=None,
        description="Heterogeneous batches: int64 [capacity.nodes], the node type index of each sampled node.",
    )
    type_features: dict[str, Region] = Field(
        default_factory=dict,
        description="Heterogeneous: each featured node type's input rows [capacity.nodes, F_t], in their order among "
        "the sampled nodes; the ready message says how many rows of each a batch fills.",
    )
    ready_event: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{128}$", description="Device slots: the producer's 'ready' IPC event."
    )
    released_event: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{128}$", description="Device slots: the rank's 'released' IPC event."
    )

    @model_validator(mode="after")
    def _check_regions(self) -> SlotLayout:
        regions = {name: getattr(self, name) for name in ("node_ids", "indptr", "indices", "labels", "features")}
        regions |= {"pairs": self.pairs, "edge_types": self.edge_types, "node_types": self.node_types}
        regions |= {f"type_features[{name}]": region for name, region in self.type_features.items()}
        for name, region in regions.items():
            if region is not None and region.end > self.memory.nbytes:
                raise ValueError(
                    f"slot region {name} ends at byte {region.end}, past the {self.memory.nbytes} of its memory"
                )
        if (self.memory.location == "device") != (self.ready_event is not None and self.released_event is not None):
            raise ValueError("a device slot carries its ready and released events, a host slot none")
        return self


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
