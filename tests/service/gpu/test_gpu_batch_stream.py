"""A `--sampler gpu` producer's batch on one stream: the GPU sampler's hops, then the tiered gather
of the very node ids it left on the device. On the CPU both kernels are emulated thread by thread
(sampler_emulation.py, gather_emulation.py) under the project's own orchestration, and the batch
equals the CPU sampler's subgraph with the CPU gather's rows."""

from __future__ import annotations

import pytest
import torch
from gather_emulation import EmulatedTable
from gpu_marks import needs_cuda
from sampler_emulation import EmulatedSampler, skewed_graph, tiered

from graphtier.contract.errors import GraphtierError
from graphtier.service.gpu.batch_stream import DeviceBatchMaker
from graphtier.service.sampling import NeighborSampler

GRAPH = skewed_graph(400, 5000, seed=11, isolated=25)
FEATURES = (torch.randn((400, 25), generator=torch.Generator().manual_seed(5)) * 10).float()  # 100 B rows


@pytest.mark.parametrize("host_end", [400, 330], ids=["no-storage", "storage-tier"])
def test_a_batch_is_the_cpu_samplers_subgraph_with_the_cpu_gathers_rows_from_the_same_ids(host_end):
    table = EmulatedTable(FEATURES, host_end, 40, 40 + 2 * 60, 2, 0)
    gather, kernel = table.gather()
    sampler = EmulatedSampler(tiered(GRAPH, 60), [5, 3])
    maker = DeviceBatchMaker(sampler, gather)
    seeds = torch.tensor([0, 3, 399, 17, 200, 1, 250, 44])
    out = table.empty_out(400)
    sub = maker.make(seeds, seed=9, out=out)
    expected_sub = NeighborSampler(GRAPH, [5, 3], backend="torch").sample(seeds, seed=9)
    assert torch.equal(sub.node_ids, expected_sub.node_ids) and torch.equal(sub.indices, expected_sub.indices)
    rows, counts = table.expected(sub.node_ids)
    n = sub.node_ids.numel()
    assert torch.equal(out[:n], rows) and out[n:].isnan().all()
    assert sampler.node_ids[0] is sub.node_ids, "the gather read the sampler's own output"
    assert len(kernel.launches) == 1
    assert counts.storage.rows > 0 or host_end == 400
    assert gather.take_counts().by_source() == counts.by_source()  # counted on the device, read once


def test_a_batch_larger_than_the_output_is_refused_before_the_gather():
    table = EmulatedTable(FEATURES, 400, 0, 0, 1, 0)
    gather, kernel = table.gather()
    maker = DeviceBatchMaker(EmulatedSampler(tiered(GRAPH, 0), [8, 8]), gather)
    with pytest.raises(GraphtierError, match=r"the batch has \d+ nodes but out holds 4 rows"):
        maker.make(torch.tensor([0, 1, 2]), seed=1, out=torch.empty((4, 25)))
    assert kernel.launches == []


@needs_cuda
def test_on_a_gpu_the_batch_is_made_on_one_stream_and_equals_the_cpu_path():
    """Real kernels: the structure's device prefix and the rest in GPU memory, the features read
    zero-copy from registered host memory; the batch on a side stream, checked after syncing it."""
    from graphtier.service.gpu.gather import CudaFeatureTiers, CudaGather
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.gpu.sampler import CudaNeighborSampler, StructureTiers
    from graphtier.service.graph.csc import CSCGraph

    host = FEATURES.clone()
    reg = host_registry().register(host.data_ptr(), host.numel() * 4, "batch stream test", read_only=False)
    try:
        tiers = CudaFeatureTiers(
            device=torch.device("cuda", 0),
            replicated_end=0,
            interleaved_end=0,
            host_end=400,
            num_rows=400,
            num_devices=1,
            device_index=0,
            dtype=torch.float32,
            row_shape=(25,),
            replicated_ptr=0,
            interleaved_ptrs=(0,),
            host_ptr=host.data_ptr(),
        )
        graph = CSCGraph(colptr=GRAPH.colptr.cuda(), row=GRAPH.row.cuda())
        sampler = CudaNeighborSampler(StructureTiers.with_device_prefix(graph, 60), [5, 3])
        gather = CudaGather(tiers)
        stream = torch.cuda.Stream()
        maker = DeviceBatchMaker(sampler, gather, stream=stream)
        seeds = torch.tensor([0, 3, 399, 17, 200, 1, 250, 44])
        out = torch.full((400, 25), float("nan"), device="cuda")
        sub = maker.make(seeds, seed=9, out=out)
        stream.synchronize()
        want = NeighborSampler(GRAPH, [5, 3], backend="torch").sample(seeds, seed=9)
        assert torch.equal(sub.node_ids.cpu(), want.node_ids)
        n = want.node_ids.numel()
        assert torch.equal(out[:n].cpu(), FEATURES[want.node_ids]) and out[n:].isnan().all()
        with torch.cuda.stream(stream):
            assert gather.take_counts().host.rows == n
    finally:
        torch.cuda.synchronize()
        host_registry().release(reg)
