"""Bad fanouts, seeds, graphs and backends raise SamplingError / GraphtierError with the bad value."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import GraphtierError, SamplingError
from graphtier.service.graph.csc import CSCGraph, build_csc
from graphtier.service.sampling import NeighborSampler


@pytest.fixture
def small() -> CSCGraph:
    return build_csc(6, torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([1, 2, 3, 4, 5, 0]))


@pytest.mark.parametrize(
    ("fanouts", "shown"),
    [
        ([], "[]"),
        ([3, 0], "fanout 0"),
        ([-2], "fanout -2"),
        ([2, 1.5], "fanout 1.5"),
        ([True], "fanout True"),
        ("15,10", "'15,10'"),
    ],
)
def test_bad_fanouts(small: CSCGraph, fanouts: object, shown: str) -> None:
    with pytest.raises(SamplingError, match=shown.replace("[", r"\[").replace("]", r"\]")):
        NeighborSampler(small, fanouts)  # type: ignore[arg-type]  # wrong types on purpose


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_bad_seeds(small: CSCGraph, backend: str) -> None:
    sampler = NeighborSampler(small, [2], backend=backend)
    with pytest.raises(SamplingError, match="seed 6 at position 1 is out of range"):
        sampler.sample(torch.tensor([0, 6]), seed=0)
    with pytest.raises(SamplingError, match="seed -1 at position 0"):
        sampler.sample(torch.tensor([-1]), seed=0)
    with pytest.raises(SamplingError, match="seed 3 .*(more than once|repeats)"):
        sampler.sample(torch.tensor([3, 1, 3]), seed=0)
    with pytest.raises(SamplingError, match="integer"):
        sampler.sample(torch.tensor([0.5]), seed=0)
    with pytest.raises(SamplingError, match="1-D"):
        sampler.sample(torch.tensor([[0]]), seed=0)
    with pytest.raises(SamplingError, match="seed must be an int"):
        sampler.sample(torch.tensor([0]), seed="x")  # type: ignore[arg-type]  # a wrong type on purpose
    # the node map is clean after the failures: a valid call gives the reference result
    after = sampler.sample(torch.tensor([3, 1]), seed=0)
    assert after.node_ids.tolist() == [3, 1, 2, 0] and after.indices.tolist() == [2, 3]


def test_bad_graphs() -> None:
    with pytest.raises(SamplingError, match="outside"):
        NeighborSampler(CSCGraph(colptr=torch.tensor([0, 1, 2]), row=torch.tensor([0, 5])), [1])
    with pytest.raises(SamplingError, match="decreases at node 1: 2 -> 1"):
        NeighborSampler(CSCGraph(colptr=torch.tensor([0, 2, 1, 2]), row=torch.tensor([0, 1])), [1])
    with pytest.raises(SamplingError, match="end at len"):
        NeighborSampler(CSCGraph(colptr=torch.tensor([0, 1, 3]), row=torch.tensor([0, 1])), [1])
    with pytest.raises(SamplingError, match="int64"):
        NeighborSampler(CSCGraph(colptr=torch.tensor([0, 1], dtype=torch.int32), row=torch.tensor([0])), [1])


def test_bad_backend(small: CSCGraph) -> None:
    with pytest.raises(GraphtierError, match="'cuda' is not one of"):
        NeighborSampler(small, [1], backend="cuda")  # type: ignore[arg-type]  # a backend it refuses, on purpose
