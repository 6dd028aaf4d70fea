"""The C++ sampler returns exactly the pure-torch sampler's output, on any number of threads."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from sampling_graphs import random_graph

from graphtier.service.graph.csc import CSCGraph
from graphtier.service.sampling import NeighborSampler

pytestmark = pytest.mark.usefixtures("needs_native")


def assert_identical(graph: CSCGraph, fanouts: list[int], seeds: torch.Tensor, seed: int) -> None:
    a = NeighborSampler(graph, fanouts, backend="native").sample(seeds, seed=seed)
    b = NeighborSampler(graph, fanouts, backend="torch").sample(seeds, seed=seed)
    assert torch.equal(a.node_ids, b.node_ids)
    assert torch.equal(a.indptr, b.indptr)
    assert torch.equal(a.indices, b.indices)
    assert a.num_nodes_per_hop == b.num_nodes_per_hop
    assert a.num_edges_per_hop == b.num_edges_per_hop


@pytest.mark.parametrize("fanouts", [[15, 10, 5], [2, -1], [-1], [1, 1, 1, 1], [40, 3]])
@pytest.mark.parametrize("seed", [0, 7, 2**64 - 1, -5])
def test_native_equals_torch(graph: CSCGraph, fanouts: list[int], seed: int) -> None:
    seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(seed % 1000))[:50]
    assert_identical(graph, fanouts, seeds, seed)


def test_native_equals_torch_with_large_fanout_and_many_threads() -> None:
    # fanouts above the C++ linear-scan limit use its bitmap path; frontiers large enough to run in parallel
    graph = random_graph(20000, 400000, 3, isolated=100)
    seeds = torch.randperm(20000, generator=torch.Generator().manual_seed(0))[:3000]
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            assert_identical(graph, [50, 33], seeds, 1234)
    finally:
        torch.set_num_threads(before)


def test_native_node_map_is_reset_between_calls(graph: CSCGraph) -> None:
    sampler = NeighborSampler(graph, [4, 4], backend="native")
    first = sampler.sample(torch.arange(5), seed=1)
    sampler.sample(torch.arange(5, 40), seed=2)
    again = sampler.sample(torch.arange(5), seed=1)
    assert torch.equal(first.node_ids, again.node_ids) and torch.equal(first.indices, again.indices)


def test_native_sampler_from_many_threads_at_once() -> None:
    # Python threads sampling at once share one helper pool: the loops that find it busy run on
    # their own thread, and every thread still gets exactly the pure-torch output.
    graph = random_graph(20000, 400000, 3, isolated=100)
    batches = [torch.randperm(20000, generator=torch.Generator().manual_seed(i))[:2000] for i in range(4)]
    expected = [NeighborSampler(graph, [20, 10], backend="torch").sample(b, seed=i) for i, b in enumerate(batches)]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        samplers = [NeighborSampler(graph, [20, 10], backend="native") for _ in batches]
        with ThreadPoolExecutor(len(batches)) as pool:
            got = list(pool.map(lambda i: samplers[i].sample(batches[i], seed=i), range(len(batches)), timeout=120))
    finally:
        torch.set_num_threads(before)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a.node_ids, b.node_ids) and torch.equal(a.indices, b.indices)


def test_native_sampler_in_a_forked_child_after_the_parent_sampled() -> None:
    # A process forked after its parent sampled on 2 threads (OpenMP hung there: libgomp waits
    # for the parent's team) starts its own helper threads. The child compares with plain lists:
    # torch's own parallel ops would hang in it for that libgomp reason.
    graph = random_graph(20000, 400000, 3, isolated=100)
    seeds = torch.randperm(20000, generator=torch.Generator().manual_seed(1))[:3000]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        sampler = NeighborSampler(graph, [20, 10], backend="native")
        parent = sampler.sample(seeds, seed=3)
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only when it sampled the parent's result
            try:
                child = sampler.sample(seeds, seed=3)
                os._exit(0 if child.indices.tolist() == parent.indices.tolist() else 1)
            except BaseException:
                os._exit(2)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung sampling")
        assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        torch.set_num_threads(before)
