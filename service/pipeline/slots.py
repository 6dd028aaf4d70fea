"""Slot buffers: one shm segment per slot holding a sampled batch's structure, labels and features.

The producer creates them through its `SegmentOwner` (so a killed producer's slots are
reclaimed by the next owner) and writes into them; the consumer attaches them read-only,
so a trainer that writes into a batch by mistake faults instead of corrupting the next one.
Regions start on 64-byte boundaries (cache lines) in the order node_ids, indptr, indices,
labels, pairs (link prediction only), features.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

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
    """Full-capacity tensors of one slot; a batch uses prefixes of them."""

    layout: SlotLayout
    node_ids: torch.Tensor
    indptr: torch.Tensor
    indices: torch.Tensor
    labels: torch.Tensor
    features: torch.Tensor | None
    pairs: torch.Tensor | None = None  # int64 [pair capacity, 2]; link prediction only


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
) -> SlotViews:
    """Create slot `index` (generation `generation`) in a new segment and return writable views.
    `batch_size` is the seeds a batch may have; `pair_capacity` the pairs of a link-prediction batch."""
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
    offsets, end = [], 0
    for _, shape, dtype in regions:
        offsets.append(end)
        end = _align(end + _nbytes(shape, dtype))
    segment = owner.create(slot_label(channel, index, generation), end)
    views: dict[str, torch.Tensor | None] = {"features": None, "pairs": None}
    refs: dict[str, SegmentRef | None] = {"features": None, "pairs": None}
    for (name, shape, dtype), offset in zip(regions, offsets, strict=True):
        views[name] = segment.view(shape, dtype, offset)
        refs[name] = segment.ref(shape, dtype, offset)
    layout = SlotLayout(index=index, generation=generation, capacity=capacity, **refs)
    return SlotViews(layout=layout, **views)


def attach_slot(layout: SlotLayout) -> SlotViews:
    """Map a slot another process created, read-only and without copying."""
    return SlotViews(
        layout=layout,
        node_ids=attach_tensor(layout.node_ids),
        indptr=attach_tensor(layout.indptr),
        indices=attach_tensor(layout.indices),
        labels=attach_tensor(layout.labels),
        features=attach_tensor(layout.features) if layout.features is not None else None,
        pairs=attach_tensor(layout.pairs) if layout.pairs is not None else None,
    )


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
