"""Backend resolution: a missing native build falls back to torch with one warning."""

from __future__ import annotations

import warnings

import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service import native_ops
from graphtier.service.graph.csc import build_csc
from graphtier.service.sampling import NeighborSampler


@pytest.fixture
def without_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRAPHTIER_NO_NATIVE", "1")
    monkeypatch.setattr(native_ops, "_state", {})


@pytest.mark.usefixtures("without_native")
def test_missing_native_warns_once_and_falls_back() -> None:
    graph = build_csc(3, torch.tensor([0, 1]), torch.tensor([1, 2]))
    with pytest.warns(RuntimeWarning, match="GRAPHTIER_NO_NATIVE"):
        sampler = NeighborSampler(graph, [1])
    assert sampler.backend == "torch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert NeighborSampler(graph, [1]).backend == "torch"
    assert sampler.sample(torch.tensor([2]), seed=0).node_ids.tolist() == [2, 1]


@pytest.mark.usefixtures("without_native")
def test_explicit_native_request_fails_clearly() -> None:
    with pytest.raises(GraphtierError, match="build_ext --inplace"):
        native_ops.resolve_backend("native", "test")


def test_auto_prefers_native_when_built(needs_native: None) -> None:
    assert native_ops.resolve_backend("auto", "test") == "native"
    assert native_ops.resolve_backend("torch", "test") == "torch"
