"""Faults with real processes: held slots, a killed or stopped producer, a consumer that leaves, a producer error."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from graphtier.service.pipeline import (
    ChannelError,
    ChannelReader,
    ProducerDiedError,
    ProducerStalledError,
    ProducerStatus,
    spawn_producer,
)
from graphtier.service.pipeline.producer import Producer
from graphtier.service.shm import SegmentOwner


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_held_slots_are_never_overwritten_and_an_early_close_stops_the_producer(make_config, segments_of):
    config = make_config(epochs=3, num_slots=2)
    with spawn_producer(config) as producer:
        reader = ChannelReader(producer.layout, timeout=20, auto_release=False)
        first, second = reader.next_batch(), reader.next_batch()
        assert {first.slot, second.slot} == {0, 1}
        kept = [(b.node_ids.clone(), b.x.clone(), b.y.clone()) for b in (first, second)]
        # Both slots are held: the producer must wait, not overwrite.
        assert wait_for(lambda: reader.stats().status == "waiting_for_slot")
        time.sleep(0.5)
        stats = reader.stats()
        assert stats.status == "waiting_for_slot" and stats.batches_produced == 2 and stats.held_slots == 2
        for batch, (ids, feats, labels) in zip((first, second), kept, strict=True):
            assert torch.equal(batch.node_ids, ids) and torch.equal(batch.x, feats)
            assert torch.equal(batch.y, labels)
        with pytest.raises(ChannelError, match="all 2 slots .* are held"):
            reader.next_batch()
        first.release()
        third = reader.next_batch()
        assert (third.batch, third.slot) == (2, first.slot)
        assert torch.equal(second.x, kept[1][1])  # still held, still intact
        assert reader.stats().producer_wait_s > 0.4
        reader.close()  # mid-epoch: the producer notices and exits cleanly
        assert producer.wait(10) == 0
        assert "exiting: consumer_gone" in producer.log()
    assert segments_of(producer.pid) == []


def test_killed_producer_raises_died_within_the_timeout_and_its_segments_are_reclaimed(make_config, segments_of):
    config = make_config(epochs=50)
    with spawn_producer(config) as producer:
        with ChannelReader(producer.layout, timeout=5) as reader:
            assert reader.next_batch() is not None
            assert segments_of(producer.pid)
            os.kill(producer.pid, signal.SIGKILL)
            start = time.monotonic()
            with pytest.raises(ProducerDiedError, match=rf"producer pid {producer.pid} of channel 'rank0'") as info:
                while True:
                    reader.next_batch()
            assert time.monotonic() - start < 5
            assert info.value.pid == producer.pid and info.value.channel == "rank0"
        producer.wait(10)
    assert segments_of(producer.pid), "SIGKILL leaves the slots behind"
    with SegmentOwner() as next_owner:
        assert set(segments_of(producer.pid)) == set()
        assert len([n for n in next_owner.reclaimed if n.startswith(f"graphtier.{producer.pid}.")]) == 3
    with pytest.raises(ProducerDiedError, match=f"producer pid {producer.pid} of channel 'rank0' is gone"):
        ChannelReader(producer.layout)  # a late consumer is told too, not left hanging


def test_stopped_producer_raises_stalled_and_sigterm_then_cleans_up(make_config, segments_of):
    config = make_config(epochs=50)
    with spawn_producer(config) as producer:
        with ChannelReader(producer.layout, timeout=1.5) as reader:
            reader.next_batch()
            os.kill(producer.pid, signal.SIGSTOP)
            try:
                start = time.monotonic()
                with pytest.raises(ProducerStalledError, match=rf"producer pid {producer.pid} .* no progress"):
                    while True:
                        reader.next_batch()
                assert time.monotonic() - start < 10
            finally:
                os.kill(producer.pid, signal.SIGCONT)
            assert producer.stop(10) == 0  # SIGTERM: a clean exit
            with pytest.raises(ProducerDiedError, match=r"was terminated \(SIGTERM\)"):
                while True:
                    reader.next_batch()
        assert "Traceback" not in producer.log()
    assert segments_of(producer.pid) == []


def test_producer_error_is_recorded_in_the_control_block(make_config, channel_dir):
    producer = Producer(make_config(connect_timeout_s=0.3))
    try:
        with pytest.raises(ChannelError, match="no consumer connected .* within 0.3 s"):
            producer.run()
        assert producer.control.status == ProducerStatus.FAILED
        assert "no consumer connected" in producer.control.stats().error
    finally:
        producer.close()
    assert not (channel_dir / "layout.json").exists() and not (channel_dir / "producer.sock").exists()


def test_a_killed_consumer_makes_the_producer_exit_cleanly(make_config, segments_of):
    config = make_config(epochs=50)
    with spawn_producer(config) as producer:
        ready_r, ready_w = os.pipe()
        child = os.fork()
        if child == 0:  # the consumer: take a batch, hold it, get killed
            try:
                reader = ChannelReader(producer.layout, timeout=20)
                reader.next_batch()
                os.write(ready_w, b"1")
                time.sleep(60)
            finally:
                os._exit(1)
        os.close(ready_w)
        try:
            assert os.read(ready_r, 1) == b"1"
        finally:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            os.close(ready_r)
        assert producer.wait(10) == 0  # it noticed the closed socket instead of waiting forever
        assert "exiting: consumer_gone" in producer.log()
    assert segments_of(producer.pid) == []
