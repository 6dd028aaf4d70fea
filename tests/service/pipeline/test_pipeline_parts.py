"""The channel's building blocks without a producer process: capacities, control block, socket, config
(the epoch plan's shards: test_epoch_plan.py)."""

from __future__ import annotations

import os
import socket

import pytest
import torch

from graphtier.contract.traffic import TrafficCounts
from graphtier.service.pipeline import ChannelError, ControlBlock, ProducerConfig, ProducerStatus, SlotCapacity
from graphtier.service.pipeline import capacity as caps
from graphtier.service.pipeline.control import control_words
from graphtier.service.pipeline.notify import ConnectionClosed, Listener, connect
from graphtier.service.pipeline.producer import main as producer_main


def test_capacity_bounds_margin_and_growth():
    bound = caps.upper_bound(batch_size=1024, fanouts=[15, 10, 5], num_nodes=10**9, num_edges=10**12)
    assert bound == SlotCapacity(nodes=1024 * 916, edges=1024 * 915, expanded=1024 * 166)
    small = caps.upper_bound(batch_size=1024, fanouts=[15, 10, 5], num_nodes=5000, num_edges=80000)
    assert small == SlotCapacity(nodes=5000, edges=80000, expanded=5000)
    assert caps.upper_bound(batch_size=4, fanouts=[-1, 2], num_nodes=50, num_edges=70).nodes == 50
    seen = SlotCapacity(nodes=100, edges=300, expanded=40)
    assert caps.with_margin(seen, 1.3, small) == SlotCapacity(nodes=130, edges=390, expanded=52)
    assert caps.with_margin(seen, 1.3, SlotCapacity(nodes=110, edges=10**6, expanded=10**6)).nodes == 110
    grown = caps.grow(SlotCapacity(nodes=200, edges=10, expanded=10), seen, 1.5, small)
    assert grown == SlotCapacity(nodes=200, edges=450, expanded=60)  # never shrinks, holds the need
    assert grown.fits(seen) and not SlotCapacity(nodes=99, edges=300, expanded=40).fits(seen)


def test_control_block_counts_and_reports():
    words = torch.zeros(control_words(3), dtype=torch.int64)
    error = torch.zeros(4096, dtype=torch.uint8)
    block = ControlBlock(words, error)
    assert not block.valid
    block.initialise(num_slots=3, producer_pid=1234, producer_start_time=99)
    assert block.valid and block.status == ProducerStatus.STARTING and block.heartbeat_age_s() < 1
    traffic = TrafficCounts.from_rows([1, 2, 3, 4, 5], 64, simulated=True)
    block.header.set_traffic(traffic, add=True)
    block.header.set_traffic(traffic, add=True)
    block.header["simulated"] = 1
    block.slots[1]["state"] = 2
    block.slots[2]["state"] = 3
    block.set_error("boom: " + "x" * 5000)
    stats = block.stats()
    assert stats.traffic == traffic + traffic
    assert (stats.ready_slots, stats.held_slots) == (1, 1)
    assert stats.slot_states == ["free", "ready", "held"]
    assert stats.error.startswith("boom: ") and len(stats.error) == 4096
    assert stats.to_dict()["traffic"]["host"] == {"rows": 8, "bytes": 512}


def test_socket_messages_and_close_detection(tmp_path):
    path = str(tmp_path / "p.sock")
    listener = Listener(path)
    try:
        client = connect(path)
        server = listener.accept(1.0)
        assert server is not None
        client.send({"kind": "hello", "pid": 7})
        assert server.recv(1.0) == {"kind": "hello", "pid": 7}
        assert server.recv(0.05) is None  # timeout, no hang
        assert server.recv(0) is None  # non-blocking poll
        client.close()
        with pytest.raises(ConnectionClosed):
            server.recv(1.0)
        with pytest.raises(ConnectionClosed):
            server.send({"kind": "end"})
        server.close()
    finally:
        listener.close()
    assert not os.path.exists(path)


def test_listener_replaces_a_dead_socket_and_refuses_a_live_one(tmp_path):
    path = str(tmp_path / "p.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    dead.bind(path)
    dead.close()  # the file stays, nobody listens: a crashed producer's leftover
    live = Listener(path)
    try:
        with pytest.raises(ChannelError, match="in use by another producer"):
            Listener(path)
    finally:
        live.close()
    with pytest.raises(ChannelError, match="107"):
        Listener("/tmp/" + "d" * 120 + "/p.sock")


def test_config_errors_name_the_field(make_config, capsys):
    good = make_config()
    assert good.channel_name == "rank0"
    text = good.model_dump_json()
    with pytest.raises(ChannelError, match="rank 3 is not below world_size 2"):
        ProducerConfig.parse(text.replace('"rank":0', '"rank":3').replace('"world_size":1', '"world_size":2'))
    with pytest.raises(ChannelError, match=r"num_slots: .*greater than or equal to 2"):
        ProducerConfig.parse(text.replace('"num_slots":2', '"num_slots":1'))
    with pytest.raises(ChannelError, match=r"fanouts: .*fanout 0 for hop 2"):
        ProducerConfig.parse(text.replace('"fanouts":[5,3]', '"fanouts":[5,0]'))
    with pytest.raises(ChannelError, match="at most 8"):
        ProducerConfig.parse(text.replace('"fanouts":[5,3]', '"fanouts":[2,2,2,2,2,2,2,2,2]'))
    with pytest.raises(ChannelError, match="/nonexistent.json: cannot read"):
        ProducerConfig.parse("@/nonexistent.json")
    with pytest.raises(ChannelError, match=r"sampler: Input should be 'cpu' or 'gpu'"):
        ProducerConfig.parse(text.replace('"sampler":"cpu"', '"sampler":"auto"'))  # the daemon resolves auto
    assert producer_main(["--config", text.replace('"epochs":2', '"epochs":0')]) == 2
    assert "epochs: Input should be greater than or equal to 1" in capsys.readouterr().err
    from graphtier.service.pipeline.config import LinkBatches

    with pytest.raises(ChannelError, match="sampler 'gpu' samples node seeds only"):
        ProducerConfig.parse(good.model_copy(update={"sampler": "gpu", "link": LinkBatches()}).model_dump_json())


def test_a_link_slot_carries_its_pairs_in_the_one_allocation():
    """The pairs region lies inside the slot's memory beside the others, survives the wire, and the
    reader's view shows the producer's writes."""
    from graphtier.service.pipeline.slots import attach_slot, create_slot
    from graphtier.service.pipeline.wire import _slot_from_proto, _slot_to_proto
    from graphtier.service.shm import SegmentOwner

    capacity = SlotCapacity(nodes=64, edges=256, expanded=40)
    with SegmentOwner() as owner:
        views = create_slot(
            owner,
            channel="t-pairs",
            index=0,
            generation=0,
            capacity=capacity,
            batch_size=24,
            feature_shape=(8,),
            pair_capacity=30,
        )
        layout = views.layout
        assert layout.pairs is not None and layout.pairs.shape == (30, 2)
        regions = sorted(
            (r.offset, r.end)
            for r in (layout.node_ids, layout.indptr, layout.indices, layout.labels, layout.pairs, layout.features)
        )
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(regions, regions[1:], strict=False))
        assert regions[-1][1] <= layout.memory.nbytes
        assert _slot_from_proto(_slot_to_proto(layout)) == layout
        views.pairs[:3] = torch.tensor([[0, 1], [2, 3], [4, 5]])
        seen = attach_slot(_slot_from_proto(_slot_to_proto(layout)))
        try:
            assert seen.pairs[:3].tolist() == [[0, 1], [2, 3], [4, 5]]
        finally:
            seen.memory.close()
        views.memory.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible (the GPU sampler can start)")
def test_a_gpu_sampling_producer_without_cuda_stops_naming_why(make_config, segments_of):
    from graphtier.service.gpu.runtime import CudaError
    from graphtier.service.pipeline.producer import Producer

    config = make_config(sampler="gpu")
    before = segments_of(os.getpid())  # the store's
    with pytest.raises(CudaError, match="torch sees no CUDA device"):
        Producer(config)
    assert segments_of(os.getpid()) == before
