"""A real producer process feeding a reader in the test: content, order, epochs, slot growth."""

from __future__ import annotations

import os
import time

import torch

from graphtier.launcher.runtime import LocalBatchSource
from graphtier.service.pipeline import ChannelReader, SlotCapacity, spawn_producer
from graphtier.service.pipeline.epoch_plan import EpochPlan
from graphtier.service.sampling import NeighborSampler


def check_batch(batch, dataset, config, sampler) -> None:
    """The batch equals the dataset's rows and a direct sample of the epoch plan's seeds with its seed."""
    train = dataset.split("train")
    plan = EpochPlan(train.numel(), config.batch_size, config.seed, config.rank, config.world_size)
    seeds = plan.batch_seeds(plan.shard(train, batch.epoch), batch.step)
    assert torch.equal(batch.seeds, seeds) and batch.sample_seed == plan.sample_seed(batch.epoch, batch.step)
    direct = sampler.sample(seeds, seed=batch.sample_seed)
    assert torch.equal(batch.node_ids, direct.node_ids)
    assert batch.subgraph.num_nodes_per_hop == direct.num_nodes_per_hop
    assert batch.subgraph.num_edges_per_hop == direct.num_edges_per_hop
    for got, want in zip(batch.blocks, direct.blocks(), strict=True):
        assert (got.num_src, got.num_dst) == (want.num_src, want.num_dst)
        assert torch.equal(got.indptr, want.indptr) and torch.equal(got.indices, want.indices)
    assert torch.equal(batch.x, dataset.features[batch.node_ids])
    assert torch.equal(batch.y, dataset.labels[seeds])
    assert batch.traffic.total_rows == batch.node_ids.numel()
    assert batch.traffic.total_bytes == batch.x.numel() * 4


def test_batches_arrive_in_order_with_the_right_content(make_config, small_rmat, segments_of, channel_dir):
    config = make_config(epochs=2, batch_size=64, num_slots=3)
    sampler = NeighborSampler(small_rmat.graph, config.fanouts)
    with spawn_producer(config) as producer:
        layout = producer.layout
        assert layout.num_slots == 3 and layout.steps_per_epoch == -(-small_rmat.split("train").numel() // 64)
        cap = layout.slots[0].capacity  # probed: far below the k-hop tree bound of 64 * 21 nodes
        assert 64 <= cap.nodes < 64 * 21 and cap.nodes <= small_rmat.manifest.num_nodes
        seen = []
        with ChannelReader(layout, timeout=20) as reader:
            for epoch in range(config.epochs):
                for batch in reader.epoch():
                    assert batch.epoch == epoch and reader.epochs_completed == epoch
                    assert batch.x.data_ptr() != 0 and not batch.released
                    check_batch(batch, small_rmat, config, sampler)
                    seen.append((batch.batch, batch.epoch, batch.step, batch.is_last_in_epoch))
                assert reader.epochs_completed == epoch + 1
            assert reader.next_batch() is None and reader.finished
            stats = reader.stats()
        steps = layout.steps_per_epoch
        assert seen == [(e * steps + s, e, s, s == steps - 1) for e in range(2) for s in range(steps)]
        assert stats.batches_produced == stats.batches_consumed == 2 * steps
        assert stats.end_of_data and stats.epochs_completed == 2 and stats.error is None
        assert stats.traffic.total_rows > 0 and stats.traffic.storage.rows > 0 and stats.traffic.simulated
        assert producer.wait(20) == 0
        assert "exiting: finished" in producer.log()
        final = producer.stats()  # the daemon's view, still readable after the exit
        assert final.status == "finished" and final.batches_consumed == 2 * steps and final.ready_slots == 0
    assert segments_of(producer.pid) == []
    assert sorted(os.listdir(channel_dir)) == ["producer.log"]  # socket and layout.json removed


def test_a_batch_larger_than_its_slot_grows_the_slot(make_config, small_rmat, segments_of):
    tiny = SlotCapacity(nodes=70, edges=16, expanded=64)  # holds the seeds, not their neighbourhoods
    config = make_config(epochs=1, batch_size=64, initial_capacity=tiny, capacity_margin=1.2)
    sampler = NeighborSampler(small_rmat.graph, config.fanouts)
    with spawn_producer(config) as producer:
        assert all(slot.capacity == tiny for slot in producer.layout.slots)
        old_segments = {slot.memory.shm_name for slot in producer.layout.slots}
        with ChannelReader(producer.layout, timeout=20) as reader:
            batches = 0
            for batch in reader.epoch():
                check_batch(batch, small_rmat, config, sampler)  # nothing truncated
                batches += 1
            stats = reader.stats()
        assert batches == producer.layout.steps_per_epoch
        assert stats.slot_growths >= 2  # both slots grew at least once
        assert producer.wait(20) == 0
        assert "grown to" in producer.log()
    assert not any(os.path.exists(f"/dev/shm/{name}") for name in old_segments)
    assert segments_of(producer.pid) == []


def test_a_grown_slots_old_memory_is_freed_only_after_the_rank_releases_the_batch_announcing_it(
    make_config, small_rmat
):
    """The rank maps slot k's old allocation until the batch announcing the new generation reaches it,
    so the producer frees the old one at the release of that batch, not when it grows the slot (for
    device slots, freeing memory another process has open over IPC is undefined behaviour)."""
    tiny = SlotCapacity(nodes=70, edges=16, expanded=64)
    config = make_config(epochs=1, batch_size=64, initial_capacity=tiny, capacity_margin=1.2)
    with spawn_producer(config) as producer:
        first = {slot.index: slot.memory.shm_name for slot in producer.layout.slots}
        with ChannelReader(producer.layout, timeout=20, auto_release=False) as reader:
            batch = reader.next_batch()
            assert batch is not None and reader._slots[batch.slot].layout.generation == 1  # grown
            old = f"/dev/shm/{first[batch.slot]}"
            time.sleep(0.3)  # the producer fills the other slot meanwhile; the old memory stays
            assert os.path.exists(old), "the producer freed a slot the rank could still map"
            batch.release()
            deadline = time.monotonic() + 10
            while os.path.exists(old) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert not os.path.exists(old), "the old allocation outlived the release of the grown batch"
            for rest in reader:
                rest.release()
        assert producer.wait(20) == 0


def test_an_in_process_source_draws_the_producers_batches(make_config, small_rmat):
    """`LocalBatchSource` follows the producers' epoch plan: for the same seed, epoch, rank and step it
    draws the same seeds, sample and rows (here rank 1 of 3: each epoch drops a different tail)."""
    config = make_config(rank=1, world_size=3, epochs=2, batch_size=48)
    local = LocalBatchSource(small_rmat, config.fanouts, 48, rank=1, world_size=3, seed=config.seed)
    with spawn_producer(config) as producer, ChannelReader(producer.layout, timeout=20) as reader:
        assert producer.layout.steps_per_epoch == local.num_train_batches()
        for epoch in range(2):
            mine = list(local.epoch_batches(epoch))
            assert len(mine) == local.num_train_batches()
            for got, want in zip(reader.epoch(), mine, strict=True):  # a slot is read before the next is asked for
                assert (got.epoch, got.step, got.batch, got.steps_per_epoch) == (
                    want.epoch, want.step, want.batch, want.steps_per_epoch,
                )  # fmt: skip
                assert torch.equal(got.seeds, want.seeds) and got.sample_seed == want.sample_seed
                assert torch.equal(got.node_ids, want.node_ids)
                for a, b in zip(got.blocks, want.blocks, strict=True):
                    assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
                assert torch.equal(got.x, want.x) and torch.equal(got.y, want.y)
        assert producer.wait(20) == 0
