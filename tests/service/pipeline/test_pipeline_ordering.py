"""The slot protocol through the ordering abstraction: the producer and the rank call their
`SlotOrdering` at the points where device slots record and wait on their interprocess events,
in an order that makes every read follow its fill and every refill follow its release. Run here
on host slots (whose ordering is the socket message itself); the CUDA events are the same calls
(tests/service/gpu/test_gpu_device_slots.py)."""

from __future__ import annotations

import os
import threading

import pytest
import torch
from pydantic import ValidationError

from graphtier.contract.errors import GraphtierError
from graphtier.service.memory import MemoryHandle
from graphtier.service.pipeline import ChannelReader
from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.ordering import HostOrdering, SlotOrdering
from graphtier.service.pipeline.producer import Producer
from graphtier.service.pipeline.wire import ChannelGrant, grant_from_proto, grant_to_proto


class Recorded(SlotOrdering):
    """Host ordering that also writes each call, with its side, into a shared log."""

    kind = "host"

    def __init__(self, side: str, log: list[tuple[str, str, int]], lock: threading.Lock) -> None:
        self.side, self.log, self.lock = side, log, lock

    def _note(self, call: str, slot: int) -> None:
        with self.lock:
            self.log.append((self.side, call, slot))

    def before_fill(self, slot: int) -> None:
        self._note("before_fill", slot)

    def after_fill(self, slot: int) -> None:
        self._note("after_fill", slot)

    def before_read(self, slot: int) -> None:
        self._note("before_read", slot)

    def after_read(self, slot: int) -> None:
        self._note("after_read", slot)


def test_every_read_follows_its_fill_and_every_refill_follows_its_release(make_config):
    config = make_config(epochs=2, batch_size=64, num_slots=2)
    log: list[tuple[str, str, int]] = []
    lock = threading.Lock()
    producer = Producer(config)
    try:
        assert isinstance(producer.ordering, HostOrdering)  # host slots: nothing beyond the socket message
        assert all(s.memory.location == "host" and s.ready_event is None for s in producer.layout.slots)
        producer.ordering = Recorded("producer", log, lock)
        runner = threading.Thread(target=producer.run, daemon=True)
        runner.start()
        with ChannelReader(producer.layout, timeout=20) as reader:
            assert reader._ordering.kind == "host"
            reader._ordering = Recorded("rank", log, lock)
            batches = sum(1 for _ in reader)
        runner.join(timeout=30)
        assert not runner.is_alive()
    finally:
        producer.close()
    assert batches == 2 * producer.layout.steps_per_epoch
    expected = {("producer", "before_fill"): "fill", ("producer", "after_fill"): "filled"}
    expected |= {("rank", "before_read"): "read", ("rank", "after_read"): "released"}
    cycle = ["fill", "filled", "read", "released"]
    per_slot: dict[int, list[str]] = {}
    for side, call, slot in log:
        per_slot.setdefault(slot, []).append(expected[side, call])
    assert sorted(per_slot) == [0, 1]
    for slot, steps in per_slot.items():
        # Per slot strictly fill -> filled -> read -> released, round after round: the rank never
        # reads before the producer marked the slot, the producer never refills before the release.
        assert steps == cycle * (len(steps) // 4), f"slot {slot}: {steps[:12]}"
    assert sum(len(steps) // 4 for steps in per_slot.values()) == batches


def test_a_channel_grant_with_its_memory_handles_round_trips_the_wire(make_config):
    producer = Producer(make_config(epochs=1))
    try:
        grant = ChannelGrant("7", producer.layout, feature_dim=32, num_classes=4, stall_timeout_s=9.0)
        assert grant_from_proto(grant_to_proto(grant)) == grant
    finally:
        producer.close()


def test_a_slot_layout_says_its_location_and_carries_events_only_for_device_memory(make_config):
    producer = Producer(make_config(epochs=1))
    try:
        slot = producer.layout.slots[0]
        device = MemoryHandle(
            location="device",
            mechanism="cuda_ipc",
            nbytes=slot.memory.nbytes,
            owner_pid=1,
            ipc_handle="ab" * 64,
            pci_bus_id="0000:18:00.0",
        )
        with pytest.raises(ValidationError, match="a device slot carries its ready and released events"):
            type(slot).model_validate({**slot.model_dump(), "memory": device.model_dump()})
        with pytest.raises(ValidationError, match="a device slot carries its ready and released events"):
            type(slot).model_validate({**slot.model_dump(), "ready_event": "cd" * 64, "released_event": "ef" * 64})
        small = slot.memory.model_copy(update={"nbytes": 8})
        with pytest.raises(ValidationError, match="past the 8 of its memory"):
            type(slot).model_validate({**slot.model_dump(), "memory": small.model_dump()})
    finally:
        producer.close()


def test_a_rank_trains_on_a_slot_where_it_lies_and_refuses_a_copy_per_step():
    from graphtier.service.sampling import SampledSubgraph

    sub = SampledSubgraph(
        node_ids=torch.arange(3),
        indptr=torch.tensor([0, 2]),
        indices=torch.tensor([1, 2]),
        num_nodes_per_hop=[1, 2],
        num_edges_per_hop=[2],
    )
    empty = Batch(subgraph=sub, x=torch.ones(3, 2), y=torch.zeros(1, dtype=torch.int64), traffic=None)  # type: ignore[arg-type]  # no traffic: not read here
    in_slot = Batch(
        subgraph=sub,
        x=torch.ones(3, 2),
        y=torch.zeros(1, dtype=torch.int64),
        traffic=None,
        slot=0,  # type: ignore[arg-type]  # no traffic: not read here
    )
    assert in_slot.on_device(torch.device("cpu")) is in_slot  # used where it lies: no copy
    assert empty.on_device(torch.device("cpu")) is empty
    with pytest.raises(GraphtierError, match="lies in a slot on cpu but this rank trains on cuda:0"):
        in_slot.on_device(torch.device("cuda", 0))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible (the GPU tests cover device slots)")
def test_device_slots_without_a_gpu_fail_saying_why_and_leave_nothing(make_config, segments_of, channel_dir):
    from graphtier.service.gpu.runtime import CudaError

    with pytest.raises(CudaError):
        Producer(make_config(device="cuda", device_memory="vmm"))
    assert [name for name in segments_of(os.getpid()) if ".rank0-" in name] == []  # no slot or control block
    assert list(channel_dir.iterdir()) == []
