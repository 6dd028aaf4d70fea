"""A --device cuda channel end to end: the producer (a real process) gathers into device slots on the
GPU, ordered by interprocess CUDA events; this process, as the rank, reads CUDA views of the slots
and trains on them without a copy of the batch."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from gpu_marks import needs_cuda

from graphtier.launcher.runtime.models.factory import build_model
from graphtier.service.pipeline import ChannelReader, ProducerConfig, spawn_producer
from graphtier.service.store import SharedDatasetStore

pytestmark = needs_cuda


@pytest.fixture(scope="module")
def gpu_store(small_rmat, tiered_plan):
    plan = tiered_plan(replicated=10, interleaved=10, num_devices=1)
    with SharedDatasetStore(small_rmat, plan, devices=[0]) as store:
        yield store


@pytest.mark.parametrize("device_memory", ["ipc", "vmm"])
def test_device_slots_are_filled_by_the_producer_and_trained_on_in_place(gpu_store, small_rmat, device_memory):
    channel_dir = Path(tempfile.mkdtemp(prefix="gtds-", dir="/tmp"))
    config = ProducerConfig(
        dataset=gpu_store.handle,
        rank=0,
        world_size=1,
        fanouts=[5, 3],
        batch_size=64,
        epochs=1,
        seed=11,
        channel_dir=channel_dir,
        num_threads=1,
        device="cuda",
        device_memory=device_memory,
        device_index=0,
    )
    cuda = torch.device("cuda", 0)
    model = build_model("sage", small_rmat.manifest.feature_dim, 16, 4, 2, 0.0, 1).to(cuda)
    try:
        with spawn_producer(config) as producer, ChannelReader(producer.layout, timeout=60, device=0) as reader:
            assert all(s.memory.location == "device" and s.ready_event for s in producer.layout.slots)
            assert reader._ordering.kind == "cuda_events"
            batches = 0
            for batch in reader:
                assert batch.x.device == cuda and batch.y.device == cuda and batch.blocks[0].indptr.device == cuda
                assert batch.traffic.simulated is False  # the device tiers' rows came from device memory
                slot = reader._slots[batch.slot]
                assert batch.x.data_ptr() == slot.features.data_ptr()  # a view of the slot itself
                assert batch.on_device(cuda) is batch
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    model(batch.blocks, batch.x)
                    torch.cuda.synchronize()
                copies = [e for e in prof.events() if "Memcpy HtoD" in e.name]
                assert copies == [], "the rank copied batch data from the host"
                want = small_rmat.features[batch.node_ids.cpu()]
                assert torch.equal(batch.x.cpu(), want)  # the bytes the producer gathered, read after its event
                batches += 1
            assert batches == producer.layout.steps_per_epoch
            assert producer.wait(60) == 0
    finally:
        shutil.rmtree(channel_dir, ignore_errors=True)
