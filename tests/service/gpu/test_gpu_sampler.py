"""The GPU neighbour sampler against the CPU one: whole batches bit-identical, for several
seeds, fanouts (-1 included), tier splits, degree-0 nodes and seeds that are each other's
neighbours. The host tier is a real registered /dev/shm mapping read in place, and its entries
that the device tier covers are poisoned, so a list read from the wrong tier shows."""

from __future__ import annotations

import pytest
import torch
from gpu_marks import needs_cuda
from sampler_emulation import skewed_graph, tiered

from graphtier.contract.errors import SamplingError
from graphtier.service.sampling import NeighborSampler

pytestmark = needs_cuda


@pytest.fixture
def on_gpu():
    """Makes a CPU `StructureTiers` the GPU's: device tier copied to the GPU, host copy placed in
    a registered shared-memory segment and viewed from the GPU without a copy."""
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.gpu.sampler import StructureTiers
    from graphtier.service.gpu.views import cuda_view
    from graphtier.service.shm import SegmentOwner

    owner, registrations = SegmentOwner(), []

    def host_view(t: torch.Tensor, name: str) -> torch.Tensor:
        _, mapped = owner.create_tensor(f"gpu-sampler-test-{name}", tuple(t.shape), t.dtype)
        mapped.copy_(t)
        registrations.append(
            host_registry().register(mapped.data_ptr(), mapped.numel() * 8, f"test {name}", read_only=False)
        )
        return cuda_view(mapped.data_ptr(), tuple(t.shape), t.dtype, 0, owner=mapped)

    def convert(cpu: StructureTiers) -> StructureTiers:
        return StructureTiers(
            device_colptr=cpu.device_colptr.cuda(),
            device_row=cpu.device_row.cuda(),
            host_colptr=host_view(cpu.host_colptr, "colptr"),
            host_row=host_view(cpu.host_row, "row"),
        )

    yield convert
    torch.cuda.synchronize()
    for reg in registrations:
        host_registry().release(reg)
    owner.close()


def _assert_same(got, expected) -> None:
    assert got.node_ids.device.type == "cuda"
    assert torch.equal(got.node_ids.cpu(), expected.node_ids)
    assert torch.equal(got.indptr.cpu(), expected.indptr)
    assert torch.equal(got.indices.cpu(), expected.indices)
    assert got.num_nodes_per_hop == expected.num_nodes_per_hop
    assert got.num_edges_per_hop == expected.num_edges_per_hop


SMALL = skewed_graph(400, 5000, seed=11, isolated=25)
LARGE = skewed_graph(20_000, 400_000, seed=3, isolated=500)


@pytest.mark.parametrize("fanouts", [[5, 3], [-1, 2], [2, -1], [40, 10], [15, 10, 5], [1, 1, 1]])
@pytest.mark.parametrize("device_end", [0, 40, 400])
@pytest.mark.parametrize("seeds_on", ["cpu", "cuda"])
def test_small_batches_are_bit_identical_to_the_cpu_samplers(on_gpu, fanouts, device_end, seeds_on):
    from graphtier.service.gpu.sampler import CudaNeighborSampler

    sampler = CudaNeighborSampler(on_gpu(tiered(SMALL, device_end)), fanouts)
    cpu = NeighborSampler(SMALL, fanouts)
    seeds = torch.tensor([0, 3, 399, 390, 17, 200, 380, 1, 250, 44])  # hubs, cold, isolated (degree 0)
    for seed in (0, 1, 2**64 - 1, -5):
        _assert_same(sampler.sample(seeds.to(seeds_on), seed=seed), cpu.sample(seeds, seed=seed))


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [-1, 5], [25, 25]])
@pytest.mark.parametrize("sm_share", [None, 0.05])
def test_large_batches_are_bit_identical_to_the_cpu_samplers(on_gpu, fanouts, sm_share):
    from graphtier.service.gpu.sampler import CudaNeighborSampler

    sampler = CudaNeighborSampler(on_gpu(tiered(LARGE, 2_000)), fanouts, sm_share=sm_share)
    cpu = NeighborSampler(LARGE, fanouts)
    for batch_seed in range(3):
        seeds = torch.randperm(LARGE.num_nodes, generator=torch.Generator().manual_seed(batch_seed))[:1024]
        expected = cpu.sample(seeds, seed=batch_seed)
        _assert_same(sampler.sample(seeds, seed=batch_seed), expected)
        assert expected.num_nodes_per_hop[-1] > 0


def test_seeds_that_neighbour_each_other_keep_their_seed_ids_and_the_map_is_reset(on_gpu):
    from graphtier.service.gpu.sampler import CudaNeighborSampler

    hub_neighbours = SMALL.row[int(SMALL.colptr[0]) : int(SMALL.colptr[1])][:5]
    seeds = torch.cat([torch.tensor([0]), hub_neighbours[hub_neighbours != 0]])
    sampler = CudaNeighborSampler(on_gpu(tiered(SMALL, 40)), [-1, 3])
    first = sampler.sample(seeds, seed=4)
    _assert_same(first, NeighborSampler(SMALL, [-1, 3]).sample(seeds, seed=4))
    assert set(first.indices[: first.num_edges_per_hop[0]].tolist()) & set(range(seeds.numel()))
    _assert_same(sampler.sample(seeds, seed=4), NeighborSampler(SMALL, [-1, 3]).sample(seeds, seed=4))


def test_bad_seeds_are_refused_as_the_cpu_sampler_refuses_them(on_gpu):
    from graphtier.service.gpu.sampler import CudaNeighborSampler

    sampler = CudaNeighborSampler(on_gpu(tiered(SMALL, 40)), [3])
    with pytest.raises(SamplingError, match="seed 5 appears more than once"):
        sampler.sample(torch.tensor([5, 6, 5], device="cuda"), seed=0)
    with pytest.raises(SamplingError, match=r"seed 400 at position 1 is out of range \[0, 400\)"):
        sampler.sample(torch.tensor([5, 400]), seed=0)
    seeds = torch.tensor([5, 6])
    _assert_same(sampler.sample(seeds, seed=0), NeighborSampler(SMALL, [3]).sample(seeds, seed=0))
