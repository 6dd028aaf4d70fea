"""`ProducerConfig`: what one producer process needs; the daemon writes it as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from graphtier.contract.fanouts import MAX_HOPS, check_channel_fanouts
from graphtier.contract.jobs.spec import MAX_NEGATIVES, DeviceKind
from graphtier.contract.link import NegativeSampling
from graphtier.contract.messages import describe_validation_error
from graphtier.contract.storage import StorageReads
from graphtier.service.memory import DeviceMemoryMode
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.layout import SlotCapacity, check_channel_name
from graphtier.service.pipeline.peer_rows import PartitionedFeatures
from graphtier.service.storage import MAX_WINDOW
from graphtier.service.store import SharedDatasetHandle


class LinkBatches(BaseModel):
    """A link-prediction job's batches: seeded by train edges, with negatives per positive edge."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    negatives: int = Field(1, ge=1, le=MAX_NEGATIVES, description="Negative pairs per positive edge.")
    negative_sampling: NegativeSampling = Field("uniform", description="uniform or corrupt-tail.")


class ProducerConfig(BaseModel):
    """One rank's producer: which data, how to sample it, and where its channel lives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dataset: SharedDatasetHandle = Field(description="The daemon's loaded dataset to attach.")
    rank: int = Field(ge=0, description="Global rank this producer feeds.")
    world_size: int = Field(ge=1, description="Ranks in the job; train ids are sharded over them.")
    fanouts: list[int] = Field(description=f"Neighbours per hop, seeds' hop first; -1 = all; <= {MAX_HOPS} hops.")
    relation_fanouts: list[str] = Field(
        default_factory=list,
        description="A heterogeneous dataset's fanouts per hop and relation ('head-rel-tail:k,...' or one int for "
        "every "
        "relation); empty = `fanouts` for every relation. Ignored by homogeneous datasets.",
    )
    batch_size: int = Field(ge=1, description="Seeds per batch.")
    epochs: int = Field(ge=1)
    seed: int = Field(ge=0, lt=2**63, description="Job seed: shared by all ranks (same permutation everywhere).")
    num_slots: int = Field(default=2, ge=2, le=16, description="Ping-pong slots; 2 or more.")
    channel_dir: Path = Field(
        description="Directory for the socket and layout.json; short (socket paths <= 107 bytes)."
    )
    channel: str | None = Field(default=None, description="Channel name (default 'rank<rank>').")
    device_index: int = Field(default=0, ge=0, description="GPU whose view of the interleaved tier is accounted.")
    capacity_margin: float = Field(
        default=1.1,
        gt=0,
        le=100,
        description="Slot size over the largest probe batch (an epoch's batches stay within a few % of it; "
        "a batch that does not fit grows its slot).",
    )
    probe_batches: int = Field(default=8, ge=1, le=1000, description="Batches sampled to size the slots.")
    initial_capacity: SlotCapacity | None = Field(default=None, description="Fixed slot capacity instead of probing.")
    connect_timeout_s: float = Field(default=120.0, gt=0, description="Exit if no consumer connects in this time.")
    heartbeat_interval_s: float = Field(default=0.2, gt=0, le=60, description="Heartbeat period while waiting.")
    num_threads: int | None = Field(default=None, ge=1, description="torch/OpenMP threads for sample and gather.")
    demote: bool = Field(
        default=True,
        description=(
            "Run as job work (more nice, SCHED_BATCH), as the daemon's own ranks run; False (the daemon's "
            "priority) for a rank another launcher started at normal priority, beside which a demoted "
            "producer starves."
        ),
    )
    sampler_backend: Literal["auto", "native", "torch"] = "auto"
    sampler: Literal["cpu", "gpu"] = Field(
        default="cpu",
        description="Sample on the CPU, or on GPU `device_index` "
        "over the structure's device tier and registered host memory.",
    )
    gpu_env: dict[str, str] = Field(
        default_factory=dict,
        description="Set in the producer's environment before CUDA initialises: the MPS pipe directory and "
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE when it runs under MPS (see graphtier.service.daemon.jobs.mps).",
    )
    grid_share: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Without MPS: the share of the SMs its GPU kernels cap their grid to; None = not capped by share.",
    )
    storage_reads: StorageReads = Field(
        default="mmap", description="How storage-tier rows are read: the file mapping, O_DIRECT, or the page cache."
    )
    window: int = Field(
        default=0,
        ge=0,
        le=MAX_WINDOW,
        description="Look-ahead window: batches sampled ahead whose storage rows are read early and shared; 0 = off.",
    )
    storage_buffer_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Memory for the storage reader's staging buffer and the look-ahead window's row cache "
        "(graphtier.service.storage.buffers), from the daemon's memory limit; None = no limit.",
    )
    link: LinkBatches | None = Field(
        default=None,
        description="Link prediction: batches of `batch_size` train edges with negatives; None = node seeds.",
    )
    device: DeviceKind = Field(
        default="cpu",
        description="Where the slots live: host shared memory, or GPU `device_index` (a `--device cuda` job: the "
        "producer gathers straight into device slots and the rank trains on them without a copy).",
    )
    device_memory: DeviceMemoryMode = Field(
        default="ipc", description="How device slots are shared: CUDA IPC handles, or VMM fds over a Unix socket."
    )
    partition: PartitionedFeatures | None = Field(
        default=None,
        description="A partitioned job's rows: this node's copy and the other nodes' daemons; None = every row here.",
    )
    hetero_partitions: dict[str, PartitionedFeatures] = Field(
        default_factory=dict,
        description="A partitioned job on a heterogeneous dataset: each featured node type's rows, split on their own "
        "(`partition` is None); empty = every row here.",
    )

    @field_validator("fanouts")
    @classmethod
    def _check_fanouts(cls, fanouts: list[int]) -> list[int]:
        return check_channel_fanouts(fanouts)

    @field_validator("channel")
    @classmethod
    def _check_channel(cls, name: str | None) -> str | None:
        return None if name is None else check_channel_name(name)

    @model_validator(mode="after")
    def _check_rank(self) -> ProducerConfig:
        if self.rank >= self.world_size:
            raise ValueError(f"rank {self.rank} is not below world_size {self.world_size}")
        if self.relation_fanouts and len(self.relation_fanouts) != len(self.fanouts):
            raise ValueError(f"relation_fanouts name {len(self.relation_fanouts)} hops, fanouts {len(self.fanouts)}")
        if self.link is not None and self.sampler == "gpu":
            raise ValueError("sampler 'gpu' samples node seeds only: a link job's pairs and negatives need sampler cpu")
        return self

    @property
    def channel_name(self) -> str:
        return self.channel or f"rank{self.rank}"

    @classmethod
    def parse(cls, text: str) -> ProducerConfig:
        """From JSON text, or from a file when `text` is '@PATH'; ChannelError saying what is wrong."""
        source = "--config"
        if text.startswith("@"):
            source = text[1:]
            try:
                text = Path(source).read_text()
            except OSError as exc:
                raise ChannelError(f"{source}: cannot read the producer config ({exc.strerror})") from None
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            problems = describe_validation_error(exc, inputs=False)
            raise ChannelError(f"{source}: invalid producer config: {problems}") from None
