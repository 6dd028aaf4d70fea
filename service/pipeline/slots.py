"""Slot buffers: one shared allocation (a memory handle) per slot holding a sampled batch's
structure, labels and features.

For a CPU job a slot is host memory, a segment of the producer's `SegmentOwner` (so a killed
producer's slots are reclaimed by the next owner) that the consumer maps read-only: a trainer
that writes into a batch by mistake faults instead of corrupting the next one. For a `--device
cuda` job it is device memory on the rank's GPU (graphtier.service.memory), and the rank's
views are CUDA tensors of it. Regions start on 64-byte boundaries (cache lines) in the order
node_ids, indptr, indices, labels, pairs (link prediction only), features; a heterogeneous batch's slot
adds edge_types and node_types and, instead of features, one region of rows per featured node type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from graphtier.service.memory import DeviceMemoryMode, FdExporter, Region, SharedMemory, allocate, open_memory
from graphtier.service.pipeline.control import ERROR_BYTES, ControlBlock, control_words
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.layout import SlotCapacity, SlotLayout
from graphtier.service.shm import SegmentOwner, SegmentRef, attach_tensor
from graphtier.service.shm.ref import dtype_name

_ALIGN = 64


def _align(offset: int) -> int:
    return (offset + _ALIGN - 1) // _ALIGN * _ALIGN


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class SlotViews:
    """Full-capacity tensors of one slot (on `memory.device`); a batch uses prefixes of them."""

    layout: SlotLayout
    memory: SharedMemory
    node_ids: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    labels: torch.Tensor
    features: torch.Tensor | None
    pairs: torch.Tensor | None = None  # int64 [pair capacity, 2]; link prediction only
    edge_types: torch.Tensor | None = None  # int64 [capacity.edges]; heterogeneous batches only
    node_types: torch.Tensor | None = None  # int64 [capacity.nodes]; heterogeneous batches only
    type_features: dict[str, torch.Tensor] = field(default_factory=dict)  # heterogeneous: type -> [capacity.nodes, F_t]

    @property
    def device(self) -> torch.device:
        return self.memory.device


def slot_label(channel: str, index: int, generation: int) -> str:
    return f"{channel}-s{index}-g{generation}"


def create_slot(
    owner: SegmentOwner,
    *,
    channel: str,
    index: int,
    generation: int,
    capacity: SlotCapacity,
    batch_size: int,
    feature_shape: tuple[int, ...] | None,
    feature_dtype: torch.dtype = torch.float32,
    pair_capacity: int | None = None,
    hetero_rows: dict[str, tuple[tuple[int, ...], torch.dtype]] | None = None,
    device: int | None = None,
    device_memory: DeviceMemoryMode = "ipc",
    exporter: FdExporter | None = None,
    events: tuple[str, str] | None = None,
) -> SlotViews:
    """Allocate slot `index` (generation `generation`) and return writable views: host memory of
    `owner`, or memory of GPU `device` shared as `device_memory` (vmm passes fds through `exporter`),
    ordered by the (ready, released) IPC `events` (`SlotOrdering.event_handles`). `batch_size` is
    the seeds a batch may have; `pair_capacity` the pairs of a link-prediction batch (None: none);
    `hetero_rows` (heterogeneous batches) each featured node type's (row shape, dtype)."""
    regions: list[tuple[str, tuple[int, ...], torch.dtype]] = [
        ("node_ids", (capacity.nodes,), torch.int64),
        ("indptr", (capacity.expanded + 1,), torch.int64),
        ("indices", (capacity.edges,), torch.int64),
        ("labels", (batch_size,), torch.int64),
    ]
    if pair_capacity is not None:
        regions.append(("pairs", (pair_capacity, 2), torch.int64))
    if feature_shape is not None:
        regions.append(("features", (capacity.nodes, *feature_shape), feature_dtype))
    if hetero_rows is not None:
        regions.append(("edge_types", (capacity.edges,), torch.int64))
        regions.append(("node_types", (capacity.nodes,), torch.int64))
        regions.extend(
            (f"type:{name}", (capacity.nodes, *shape), dtype) for name, (shape, dtype) in hetero_rows.items()
        )
    placed: dict[str, Region | None] = {"features": None, "pairs": None}
    type_features: dict[str, Region] = {}
    end = 0
    for name, shape, dtype in regions:
        region = Region(offset=end, shape=shape, dtype=dtype_name(dtype))
        if name.startswith("type:"):
            type_features[name.removeprefix("type:")] = region
        else:
            placed[name] = region
        end = _align(end + _nbytes(shape, dtype))
    memory = allocate(
        slot_label(channel, index, generation),
        end,
        owner=owner,
        device=device,
        mode=device_memory,
        exporter=exporter,
    )
    ready, released = events if events is not None else (None, None)
    try:
        layout = SlotLayout(
            index=index,
            generation=generation,
            capacity=capacity,
            memory=memory.handle,
            ready_event=ready,
            released_event=released,
            type_features=type_features,
            **placed,
        )
    except BaseException:
        memory.close()
        raise
    return _views(layout, memory)


def _views(layout: SlotLayout, memory: SharedMemory) -> SlotViews:
    features = memory.view(layout.features) if layout.features is not None else None
    return SlotViews(
        layout=layout,
        memory=memory,
        node_ids=memory.view(layout.node_ids),
        indptr=memory.view(layout.indptr),
        indices=memory.view(layout.indices),
        labels=memory.view(layout.labels),
        features=features,
        pairs=memory.view(layout.pairs) if layout.pairs is not None else None,
        edge_types=memory.view(layout.edge_types) if layout.edge_types is not None else None,
        node_types=memory.view(layout.node_types) if layout.node_types is not None else None,
        type_features={name: memory.view(region) for name, region in layout.type_features.items()},
    )


def attach_slot(layout: SlotLayout, *, device: int | None = None) -> SlotViews:
    """Map a slot another process created, without copying: host slots read-only, device slots on
    this process's GPU `device` (its ordinal of the slot's GPU when None)."""
    memory = open_memory(layout.memory, device=device)
    try:
        return _views(layout, memory)
    except BaseException:
        memory.close()
        raise


def create_control(owner: SegmentOwner, *, channel: str, num_slots: int) -> tuple[ControlBlock, SegmentRef, SegmentRef]:
    """The control block segment: int64 words, then the error text buffer."""
    words = control_words(num_slots)
    segment = owner.create(f"{channel}-control", words * 8 + ERROR_BYTES)
    control_ref = segment.ref((words,), torch.int64, 0)
    error_ref = segment.ref((ERROR_BYTES,), torch.uint8, words * 8)
    block = ControlBlock(segment.view((words,), torch.int64, 0), segment.view((ERROR_BYTES,), torch.uint8, words * 8))
    return block, control_ref, error_ref


def attach_control(control: SegmentRef, error_text: SegmentRef, *, writable: bool) -> ControlBlock:
    """The control block of a channel; the consumer attaches it writable, monitors read-only."""
    if dtype_name(control.dtype) != "int64" or dtype_name(error_text.dtype) != "uint8":
        raise ChannelError(f"control block refs have dtypes {control.dtype}/{error_text.dtype}, expected int64/uint8")
    return ControlBlock(attach_tensor(control, writable=writable), attach_tensor(error_text, writable=writable))
