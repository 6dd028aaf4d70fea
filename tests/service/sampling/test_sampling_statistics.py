"""Uniformity of sampling without replacement: inclusion frequency min(1, k/d) and uniform subsets.

All randomness is counter-based with fixed seeds, so these checks are deterministic, not flaky;
bounds are ~5 standard deviations so a correct sampler passes for any fixed seed.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from graphtier.service.graph.csc import build_csc
from graphtier.service.sampling import NeighborSampler


def fan_in_graph(num_dst: int, degree: int):
    """Destinations 0..num_dst-1 all share in-neighbours num_dst..num_dst+degree-1."""
    src = torch.arange(num_dst, num_dst + degree).repeat(num_dst)
    dst = torch.arange(num_dst).repeat_interleave(degree)
    return build_csc(num_dst + degree, src, dst)


@pytest.mark.parametrize("backend", ["torch", "auto"])
@pytest.mark.parametrize(("degree", "k"), [(20, 5), (7, 6), (30, 1), (4, 10)])
def test_inclusion_frequency_matches_k_over_d(backend: str, degree: int, k: int) -> None:
    trials = 4000  # one trial per seed node: each has its own draw stream
    graph = fan_in_graph(trials, degree)
    sub = NeighborSampler(graph, [k], backend=backend).sample(torch.arange(trials), seed=2024)
    assert sub.indptr.diff().eq(min(k, degree)).all()
    picked = sub.node_ids[sub.indices] - trials
    freq = torch.bincount(picked, minlength=degree).double()
    p = min(1.0, k / degree)
    sd = math.sqrt(trials * p * (1 - p))
    assert (freq - trials * p).abs().max().item() <= 5 * sd + 1e-9


def test_inclusion_frequency_across_sampler_seeds() -> None:
    degree, k, trials = 12, 4, 1500
    graph = fan_in_graph(1, degree)
    sampler = NeighborSampler(graph, [k])
    freq = torch.zeros(degree)
    for s in range(trials):
        sub = sampler.sample(torch.tensor([0]), seed=s)
        freq += torch.bincount(sub.node_ids[sub.indices] - 1, minlength=degree)
    p = k / degree
    assert (freq - trials * p).abs().max().item() <= 5 * math.sqrt(trials * p * (1 - p))


def test_every_subset_is_equally_likely() -> None:
    degree, k, trials = 6, 3, 20000
    graph = fan_in_graph(trials, degree)
    sub = NeighborSampler(graph, [k], backend="torch").sample(torch.arange(trials), seed=77)
    subsets = (sub.node_ids[sub.indices] - trials).view(trials, k)
    code = (1 << subsets).sum(dim=1)
    observed = torch.bincount(code, minlength=1 << degree).double()
    valid = [sum(1 << i for i in c) for c in itertools.combinations(range(degree), k)]
    assert observed.sum().item() == observed[valid].sum().item() == trials
    expected = trials / len(valid)
    chi2 = ((observed[valid] - expected) ** 2 / expected).sum().item()
    assert chi2 < 50.0  # 19 degrees of freedom: P(chi2 > 50) ~ 1e-4
