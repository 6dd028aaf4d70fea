"""The GPU sampler's index math on the CPU: its kernels re-stated thread by thread
(sampler_emulation.py) under its own hop orchestration (service.gpu.sampler.sample_hops) give
exactly the CPU sampler's subgraphs, reading each list from the tier the kernels would."""

from __future__ import annotations

import pytest
import torch
from sampler_emulation import POISON, EmulatedKernels, skewed_graph, tiered

from graphtier.contract.errors import SamplingError
from graphtier.service.gpu.sampler import StructureTiers, check_seeds, sample_hops, seed_word
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.sampling import NeighborSampler

GRAPH = skewed_graph(400, 5000, seed=11, isolated=25)


def _emulated(structure: StructureTiers, seeds: torch.Tensor, fanouts: list[int], seed: int, **grid):
    kernels = EmulatedKernels(structure, **grid)
    node_map = torch.full((structure.num_nodes,), -1, dtype=torch.int64)
    sub = sample_hops(
        kernels, check_seeds(seeds, structure.num_nodes, structure.device), fanouts, seed_word(seed), node_map
    )
    assert bool((node_map == -1).all()), "the node map is not reset"
    return sub, kernels


def _assert_same(got, expected) -> None:
    assert torch.equal(got.node_ids, expected.node_ids)
    assert torch.equal(got.indptr, expected.indptr)
    assert torch.equal(got.indices, expected.indices)
    assert got.num_nodes_per_hop == expected.num_nodes_per_hop
    assert got.num_edges_per_hop == expected.num_edges_per_hop


@pytest.mark.parametrize(
    ("fanouts", "device_end", "seed"),
    [([5, 3], 40, 0), ([-1, 2], 0, 7), ([2, -1], 400, 2**64 - 1), ([40, 10], 120, -5), ([1, 1, 1], 1, 123)],
    ids=["floyd", "all-then-floyd-host-only", "floyd-then-all-device-only", "fanout-past-32", "three-hops"],
)
def test_emulated_kernels_sample_exactly_what_the_cpu_sampler_samples(fanouts, device_end, seed):
    # seeds: hubs (in the device tier), cold nodes, and isolated ones (degree 0)
    seeds = torch.tensor([0, 3, 399, 390, 17, 200, 380, 1, 250, 44])
    expected = NeighborSampler(GRAPH, fanouts, backend="torch").sample(seeds, seed=seed)
    got, kernels = _emulated(tiered(GRAPH, device_end), seeds, fanouts, seed)
    _assert_same(got, expected)
    assert got.num_edges > 0
    if 0 < device_end < GRAPH.num_nodes:
        assert kernels.reads["device"] and kernels.reads["host"]


@pytest.mark.parametrize("grid", [{"max_blocks": 1, "threads": 32}, {"max_blocks": 64, "threads": 64}])
@pytest.mark.parametrize("order_seed", [1, 2])
def test_the_result_does_not_depend_on_the_grid_or_the_order_threads_run_in(grid, order_seed):
    seeds = torch.randperm(400, generator=torch.Generator().manual_seed(order_seed))[:64]
    expected = NeighborSampler(GRAPH, [4, 4], backend="torch").sample(seeds, seed=99)
    got, _ = _emulated(tiered(GRAPH, 60), seeds, [4, 4], 99, order_seed=order_seed, **grid)
    _assert_same(got, expected)


def test_a_batch_of_only_isolated_seeds_has_no_edges():
    seeds = torch.tensor([399, 398, 380])
    got, _ = _emulated(tiered(GRAPH, 10), seeds, [3, -1], 5)
    _assert_same(got, NeighborSampler(GRAPH, [3, -1], backend="torch").sample(seeds, seed=5))
    assert got.num_nodes_per_hop == [3, 0, 0] and got.indptr.tolist() == [0, 0, 0, 0]


def test_reading_the_poisoned_host_copy_for_a_device_node_would_show():
    """The tier split is what the test relies on: a kernel reading the host copy of a device
    node's list gets POISON, far outside the graph."""
    structure = tiered(GRAPH, 50)
    assert int(structure.host_row[0]) == POISON and int(structure.host_colptr[1]) == POISON
    wrong = StructureTiers.host_only(CSCGraph(colptr=structure.host_colptr, row=structure.host_row))
    with pytest.raises(IndexError):
        _emulated(wrong, torch.tensor([0, 1]), [3], 1)


def test_duplicate_and_out_of_range_seeds_are_refused_with_the_cpu_samplers_words():
    with pytest.raises(SamplingError, match="seed 3 appears more than once"):
        check_seeds(torch.tensor([3, 5, 3]), 400, torch.device("cpu"))
    with pytest.raises(SamplingError, match=r"seed 400 at position 1 is out of range \[0, 400\)"):
        check_seeds(torch.tensor([3, 400]), 400, torch.device("cpu"))


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ({"device_colptr": torch.tensor([0, 2])}, "the device tier of 1 nodes holds 0 row entries"),
        ({"host_row": torch.zeros(3, dtype=torch.int64)}, "host_colptr ends at"),
        ({"device_row": torch.zeros(0, dtype=torch.int32)}, "device_row must be a contiguous 1-D int64"),
    ],
)
def test_a_structure_that_does_not_fit_together_is_refused(parts, message):
    fields = {
        "device_colptr": torch.tensor([0]),
        "device_row": torch.zeros(0, dtype=torch.int64),
        "host_colptr": GRAPH.colptr,
        "host_row": GRAPH.row,
    }
    with pytest.raises(SamplingError, match=message):
        StructureTiers(**{**fields, **parts})


@pytest.mark.parametrize("structure_budget", [8 * (50 + 1 + 200), 8 * 1500, 0])
def test_the_daemons_device_structure_tier_and_the_host_rest_sample_what_the_cpu_sampler_samples(structure_budget):
    """The tier as the daemon lays it out: a plan from a structure budget, the device tier's
    contents cut as DeviceStructureSet fills its allocations, and the sampler's structure made
    as a producer makes it from its mapped pair and the host CSC (here poisoned where the device
    tier covers it)."""
    from graphtier.service.gpu.sampler import tiered_structure
    from graphtier.service.placement import PlacementPlan, TierBudgets
    from graphtier.service.store.device_tiers import structure_prefix

    budgets = TierBudgets(num_devices=1, structure_device_bytes=structure_budget)
    plan = PlacementPlan.from_budgets(budgets, num_nodes=GRAPH.num_nodes, row_bytes=0, colptr=GRAPH.colptr)
    assert plan.structure_device_bytes <= structure_budget
    colptr, row = (t.clone() for t in structure_prefix(plan, GRAPH.colptr, GRAPH.row))
    assert colptr.numel() * 8 + row.numel() * 8 == plan.structure_device_bytes or not plan.structure_device_end
    host = tiered(GRAPH, plan.structure_device_end)  # its host copy poisoned over the device tier
    mapped = (colptr, row) if plan.structure_device_end else None  # no structure placed: host only
    structure = tiered_structure(CSCGraph(colptr=host.host_colptr, row=host.host_row), mapped)
    assert structure.device_end == plan.structure_device_end
    seeds = torch.tensor([0, 3, 399, 17, 200, 1, 250, 44, 60, 120])
    expected = NeighborSampler(GRAPH, [6, 4], backend="torch").sample(seeds, seed=31)
    got, kernels = _emulated(structure, seeds, [6, 4], 31)
    _assert_same(got, expected)
    assert bool(kernels.reads["device"]) == bool(plan.structure_device_end) and kernels.reads["host"]


def test_a_csc_that_does_not_match_the_plan_is_refused_before_anything_is_placed():
    from graphtier.contract.errors import GraphtierError
    from graphtier.service.placement import PlacementPlan, TierBudgets
    from graphtier.service.store.device_tiers import structure_prefix

    budgets = TierBudgets(num_devices=1, structure_device_bytes=8 * 300)
    plan = PlacementPlan.from_budgets(budgets, num_nodes=GRAPH.num_nodes, row_bytes=0, colptr=GRAPH.colptr)
    with pytest.raises(GraphtierError, match="does not match the plan's structure tier"):
        structure_prefix(plan, GRAPH.colptr[:-1], GRAPH.row)
