"""A `--sampler gpu` producer's batches, made on one stream straight into its slot
(`DeviceSlotBatches`), and the storage rows its gather stages through the storage reader.

On the CPU the sampler's and the gather's kernels are emulated thread by thread over CPU tensors
(sampler_emulation.py, gather_emulation.py) and the slots are host slots: every region the rank
reads (node ids, indptr, indices, labels, feature rows) must equal, bit for bit, what the CPU
producer writes for the same seeds (the CPU sampler, `write_structure`, the CPU tiered gather).
The last test runs a real `--device cuda --sampler gpu` job where a GPU is present."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from gather_emulation import EmulatedTable
from gpu_marks import needs_cuda
from sampler_emulation import EmulatedSampler, skewed_graph, tiered

from graphtier.contract.traffic import TrafficCounts
from graphtier.service.gather import FeatureTiers, tiered_gather
from graphtier.service.pipeline.device_batches import DeviceSlotBatches, write_structure
from graphtier.service.pipeline.layout import SlotCapacity
from graphtier.service.pipeline.slots import SlotViews, create_slot
from graphtier.service.sampling import NeighborSampler, SampledSubgraph
from graphtier.service.shm import SegmentOwner
from graphtier.service.storage import StorageReader

NUM_NODES, DIM, FANOUTS, BATCH = 400, 25, [5, 3], 8
GRAPH = skewed_graph(NUM_NODES, 5000, seed=11, isolated=25)
FEATURES = (torch.randn((NUM_NODES, DIM), generator=torch.Generator().manual_seed(5)) * 10).float()  # 100 B rows
LABELS = torch.randint(0, 7, (NUM_NODES,), generator=torch.Generator().manual_seed(6))
SEED_SETS = [
    (torch.tensor([0, 3, 399, 17, 200, 1, 250, 44]), 9),
    (torch.tensor([5, 6, 7, 300, 310, 320, 2, 100]), 10),
    (torch.tensor([398, 397, 40, 41, 42, 43, 150, 151]), 11),
]
CAPACITY = SlotCapacity(nodes=NUM_NODES, edges=2000, expanded=NUM_NODES)


def _slot(owner: SegmentOwner, index: int, *, features: bool = True) -> SlotViews:
    return create_slot(
        owner,
        channel=f"gtpb{os.getpid()}",
        index=index,
        generation=0,
        capacity=CAPACITY,
        batch_size=BATCH,
        feature_shape=(DIM,) if features else None,
    )


def _cpu_tiers(host_end: int) -> FeatureTiers:
    """The CPU producer's view of the same placement (2 devices' tiers read from their host copy)."""
    return FeatureTiers(
        replicated_end=40,
        interleaved_end=40 + 2 * 60,
        host_end=host_end,
        num_rows=NUM_NODES,
        num_devices=2,
        device_index=0,
        resident=FEATURES[:host_end].clone(),
        storage=FEATURES[host_end:].clone(),
    )


def _used(views: SlotViews, sub: SampledSubgraph) -> dict[str, torch.Tensor]:
    """The prefixes of the slot a batch fills (what the rank reads)."""
    n, e, x = sub.num_nodes, sub.num_edges, sub.indptr.numel() - 1
    regions = {
        "node_ids": views.node_ids[:n],
        "indptr": views.indptr[: x + 1],
        "indices": views.indices[:e],
        "labels": views.labels[:BATCH],
    }
    if views.features is not None:
        regions["features"] = views.features[:n]
    return {name: t.clone() for name, t in regions.items()}


def _cpu_producer_batch(views: SlotViews, seeds: torch.Tensor, seed: int, host_end: int | None):
    """What the CPU producer writes for these seeds: the CPU sampler, then the CPU gather."""
    sub = NeighborSampler(GRAPH, FANOUTS, backend="torch").sample(seeds, seed=seed)
    write_structure(views, sub, LABELS, seeds.numel())
    traffic = None
    if host_end is not None:
        assert views.features is not None
        traffic = tiered_gather(sub.node_ids, _cpu_tiers(host_end), views.features)
    return sub, traffic


@pytest.mark.parametrize("host_end", [NUM_NODES, 330], ids=["no-storage", "storage-tier"])
def test_one_stream_batches_fill_the_slot_bit_identically_to_the_cpu_producer(host_end):
    table = EmulatedTable(FEATURES, host_end, 40, 40 + 2 * 60, 2, 0)
    gather, kernel = table.gather()
    sampler = EmulatedSampler(tiered(GRAPH, 60), FANOUTS)
    batches = DeviceSlotBatches(sampler, gather, LABELS.clone())
    expected_rows = [0] * 6
    with SegmentOwner() as owner:
        device_slot, cpu_slot = _slot(owner, 0), _slot(owner, 1)
        for step, (seeds, seed) in enumerate(SEED_SETS):
            device_slot.features.fill_(float("nan"))
            launches = len(kernel.launches)
            taken: list[SampledSubgraph] = []

            def into(sub: SampledSubgraph, launches: int = launches, taken: list = taken) -> SlotViews:
                assert len(kernel.launches) == launches, "the slot is taken before the gather writes into it"
                assert sub.node_ids is sampler.node_ids[-1], "sized from the sample on the device"
                taken.append(sub)
                return device_slot

            sub, views = batches.make(seeds, seed=seed, into=into)
            assert views is device_slot and taken == [sub]
            assert len(kernel.launches) == launches + 1, "one gather launch per batch"
            want_sub, traffic = _cpu_producer_batch(cpu_slot, seeds, seed, host_end)
            assert sub.num_nodes_per_hop == want_sub.num_nodes_per_hop, step
            assert sub.num_edges_per_hop == want_sub.num_edges_per_hop, step
            got, want = _used(device_slot, sub), _used(cpu_slot, want_sub)
            for name in want:
                assert got[name].dtype == want[name].dtype, name
                assert torch.equal(got[name].view(torch.uint8), want[name].view(torch.uint8)), (step, name)
            assert torch.equal(got["labels"], LABELS[seeds])
            assert device_slot.features[sub.num_nodes :].isnan().all(), "nothing past the batch's rows"
            expected_rows = [a + t.rows for a, t in zip(expected_rows, traffic.by_source().values(), strict=True)]
    # counted on the device per batch, read back once for all three
    counts = batches.take_traffic()
    assert counts is not None and [t.rows for t in counts.by_source().values()] == expected_rows
    assert host_end == NUM_NODES or counts.storage.rows > 0
    assert batches.take_traffic().total_rows == 0, "taking the counts zeroes them"


def test_one_stream_batches_without_features_write_the_structure_and_labels():
    sampler = EmulatedSampler(tiered(GRAPH, 60), FANOUTS)
    batches = DeviceSlotBatches(sampler, None, None)
    seeds, seed = SEED_SETS[0]
    with SegmentOwner() as owner:
        device_slot, cpu_slot = _slot(owner, 0, features=False), _slot(owner, 1, features=False)
        sub, _ = batches.make(seeds, seed=seed, into=lambda sub: device_slot)
        want_sub = NeighborSampler(GRAPH, FANOUTS, backend="torch").sample(seeds, seed=seed)
        write_structure(cpu_slot, want_sub, None, seeds.numel())
        got, want = _used(device_slot, sub), _used(cpu_slot, want_sub)
        assert set(got) == {"node_ids", "indptr", "indices", "labels"}
        for name in want:
            assert torch.equal(got[name], want[name]), name
        assert (got["labels"] == -1).all()
    assert batches.take_traffic() is None


def _direct_supported(path: Path) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["direct", "page-cache"])
def test_storage_rows_are_staged_through_the_storage_reader(tmp_path, mode):
    """`--storage-reads direct|page-cache` on device slots: the gather's staged storage rows come from
    the dataset's `StorageReader` (the file, not its mapping), and its requests are what is counted."""
    host_end = 330
    path = tmp_path / "storage.npy"
    np.save(path, FEATURES[host_end:].numpy())
    if mode == "direct" and not _direct_supported(path):
        pytest.skip(f"{tmp_path} does not open files with O_DIRECT")
    table = EmulatedTable(FEATURES, host_end, 40, 40 + 2 * 60, 2, 0)
    table.tiers.storage.fill_(float("nan"))  # the mapping is never read: its rows would show as NaN
    reader = StorageReader(
        path, data_offset=128, row_bytes=DIM * 4, first_row=0, num_rows=NUM_NODES - host_end, mode=mode
    )
    try:
        gather, _ = table.gather(storage_reader=reader)
        sampler = EmulatedSampler(tiered(GRAPH, 60), FANOUTS)
        batches = DeviceSlotBatches(sampler, gather, LABELS.clone())
        with SegmentOwner() as owner:
            slot = _slot(owner, 0)
            storage_rows = 0
            for seeds, seed in SEED_SETS:
                sub, _ = batches.make(seeds, seed=seed, into=lambda sub: slot)
                n = sub.num_nodes
                assert torch.equal(slot.features[:n], FEATURES[sub.node_ids]), "rows read from the file"
                storage_rows += int((sub.node_ids >= host_end).sum())
        assert storage_rows > 0
        assert batches.take_traffic().storage.rows == storage_rows
        assert reader.stats.requests > 0 and reader.stats.bytes_read >= storage_rows * DIM * 4
    finally:
        reader.close()


def test_direct_reads_of_adjacent_storage_rows_land_in_the_staging_buffer(tmp_path):
    """The staged rows are placed congruent to the file modulo the reader's memory alignment, so
    O_DIRECT reads of a run of adjacent rows go straight into the (pinned) buffer, no bounce copy."""
    table_rows = (torch.randn((1200, 32), generator=torch.Generator().manual_seed(8)) * 10).float()  # 128 B
    host_end = 200
    path = tmp_path / "storage.npy"
    np.save(path, table_rows[host_end:].numpy())
    if not _direct_supported(path):
        pytest.skip(f"{tmp_path} does not open files with O_DIRECT")
    table = EmulatedTable(table_rows, host_end, 0, 0, 1, 0)
    reader = StorageReader(path, data_offset=128, row_bytes=128, first_row=0, num_rows=1000, mode="direct")
    try:
        gather, _ = table.gather(storage_reader=reader)
        ids = torch.randperm(1200 - 17, generator=torch.Generator().manual_seed(2)) + 17  # one long storage run
        out = table.empty_out(ids.numel())
        counts = gather.gather(ids, out)
        assert torch.equal(out[: ids.numel()], table_rows[ids])
        assert counts.storage.rows == 1000
        assert reader.stats.direct_requests > 0, "the run was read straight into the staged rows"
    finally:
        reader.close()


def _read_channel(producer) -> tuple[list[dict[str, torch.Tensor]], TrafficCounts]:
    """Every batch of an in-process producer's channel (its regions copied) and its traffic counters."""
    import threading

    from graphtier.service.pipeline import ChannelReader

    runner = threading.Thread(target=producer.run, daemon=True)
    runner.start()
    seen = []
    with ChannelReader(producer.layout, timeout=60) as reader:
        for batch in reader:
            sub = batch.subgraph
            seen.append(
                {
                    "node_ids": sub.node_ids.clone(),
                    "indptr": sub.indptr.clone(),
                    "indices": sub.indices.clone(),
                    "labels": batch.y.clone(),
                    "features": batch.x.clone(),
                    "sizes": torch.tensor(sub.num_nodes_per_hop + sub.num_edges_per_hop),
                }
            )
        runner.join(timeout=60)
        assert not runner.is_alive()
        return seen, reader.stats().traffic


def test_a_producer_making_one_stream_batches_serves_the_cpu_producers_batches(small_rmat, tiered_plan):
    """The producer loop of a `--sampler gpu` job (batches unsampled until made, the slot taken once
    the sizes are known, traffic read back per interval) over the emulated kernels and host slots:
    the rank reads the very batches, and the job counts the very rows, of the CPU producer. Only the
    GPU sampler's construction (CUDA) is replaced: by the emulated one over the same CSC."""
    from graphtier.service.pipeline import ProducerConfig
    from graphtier.service.pipeline.producer import Producer
    from graphtier.service.store import SharedDatasetStore

    plan = tiered_plan(replicated=20, interleaved=10, num_devices=2)
    channel_root = Path(tempfile.mkdtemp(prefix="gtpb-", dir="/tmp"))
    results = {}
    try:
        with SharedDatasetStore(small_rmat, plan) as store:
            for kind in ("cpu", "one-stream"):
                config = ProducerConfig(
                    dataset=store.handle,
                    rank=0,
                    world_size=1,
                    fanouts=[5, 3],
                    batch_size=64,
                    epochs=1,
                    seed=11,
                    channel_dir=channel_root / kind,
                    num_slots=2,
                    num_threads=1,
                    heartbeat_interval_s=0.05,
                )
                producer = Producer(config)
                try:
                    if kind == "one-stream":
                        t = producer.tiers
                        table = EmulatedTable(
                            small_rmat.features, t.host_end, t.replicated_end, t.interleaved_end, t.num_devices, 0
                        )
                        gather, kernel = table.gather()
                        sampler = EmulatedSampler(tiered(producer.dataset.graph, 300), [5, 3])
                        labels = producer.dataset.labels
                        producer.device_batches = DeviceSlotBatches(sampler, gather, labels)
                        producer._traffic_due = 0.0
                    results[kind] = _read_channel(producer)
                finally:
                    producer.close()
    finally:
        shutil.rmtree(channel_root, ignore_errors=True)
    (got, got_traffic), (want, want_traffic) = results["one-stream"], results["cpu"]
    assert len(got) == len(want) > 1
    assert len(kernel.launches) == len(got), "one gather launch per batch"
    assert len(sampler.node_ids) == len(got), "every batch sampled once, when it was made"
    for step, (g, w) in enumerate(zip(got, want, strict=True)):
        for name in w:
            assert torch.equal(g[name], w[name]), (step, name)
    rows = {name: t.rows for name, t in got_traffic.by_source().items()}
    assert rows == {name: t.rows for name, t in want_traffic.by_source().items()}
    assert rows["storage"] > 0 and rows["replicated"] > 0


@needs_cuda
def test_a_gpu_sampled_job_trains_on_the_batches_of_the_cpu_sampled_one(small_rmat):
    """A real `--device cuda --sampler gpu` channel: the producer samples and gathers on its GPU into
    device slots, its storage rows read by the storage reader; every batch the rank reads equals the
    `--sampler cpu` channel's (storage rows from the mapping), region by region."""
    from graphtier.service.pipeline import ChannelReader, ProducerConfig, spawn_producer
    from graphtier.service.placement import PlacementPlan, TierBudgets
    from graphtier.service.store import SharedDatasetStore

    n, row_bytes = small_rmat.manifest.num_nodes, small_rmat.manifest.feature_row_bytes
    budgets = TierBudgets(
        device_replicated_bytes=n * row_bytes // 10,
        device_interleaved_bytes=0,
        num_devices=1,
        host_bytes=n * row_bytes // 2,
        structure_device_bytes=small_rmat.manifest.num_edges * 4,
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes, colptr=small_rmat.graph.colptr)
    assert 0 < plan.structure_device_end < n  # the sampler reads both structure tiers
    batches: dict[str, list[dict[str, torch.Tensor]]] = {}
    traffic: dict[str, TrafficCounts] = {}
    channel_root = Path(tempfile.mkdtemp(prefix="gtgs-", dir="/tmp"))
    try:
        with SharedDatasetStore(small_rmat, plan, devices=[0]) as store:
            for sampler in ("cpu", "gpu"):
                config = ProducerConfig(
                    dataset=store.handle,
                    rank=0,
                    world_size=1,
                    fanouts=[5, 3],
                    batch_size=64,
                    epochs=1,
                    seed=11,
                    channel_dir=channel_root / sampler,
                    num_threads=1,
                    device="cuda",
                    device_index=0,
                    sampler=sampler,
                    storage_reads="page-cache" if sampler == "gpu" else "mmap",  # staged through the reader
                )
                seen = batches.setdefault(sampler, [])
                with spawn_producer(config) as producer, ChannelReader(producer.layout, timeout=60, device=0) as r:
                    for batch in r:
                        assert batch.x.device.type == "cuda"
                        sub = batch.subgraph
                        seen.append(
                            {
                                "node_ids": sub.node_ids.cpu(),
                                "indptr": sub.indptr.cpu(),
                                "indices": sub.indices.cpu(),
                                "labels": batch.y.cpu(),
                                "features": batch.x.cpu(),
                            }
                        )
                        batch.release()
                    stats = r.stats()
                    traffic[sampler] = stats.traffic  # the GPU producer's: read from the device per interval
                    if sampler == "gpu":
                        assert stats.storage.mode == "page-cache" and stats.storage.requests > 0
    finally:
        shutil.rmtree(channel_root, ignore_errors=True)
    assert len(batches["gpu"]) == len(batches["cpu"]) > 0
    for step, (got, want) in enumerate(zip(batches["gpu"], batches["cpu"], strict=True)):
        for name in want:
            assert torch.equal(got[name], want[name]), (step, name)
    assert traffic["gpu"].total_rows == traffic["cpu"].total_rows == sum(b["node_ids"].numel() for b in batches["cpu"])
