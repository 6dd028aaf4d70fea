"""Fixtures for the sampling tests: small real graphs and the native-ops skip."""

from __future__ import annotations

import pytest
from sampling_graphs import random_graph

from graphtier.service.graph.csc import CSCGraph
from graphtier.service.native_ops import native_available, unavailable_reason


@pytest.fixture
def needs_native() -> None:
    """Skip a test that exercises the compiled op when it is not built."""
    if not native_available():
        pytest.skip(f"native ops not built: {unavailable_reason()}")


@pytest.fixture(
    params=[(300, 4000, 0, 0), (1000, 20000, 1, 50), (60, 200, 2, 10)],
    ids=["medium", "dense-with-isolated", "sparse-with-isolated"],
)
def graph(request: pytest.FixtureRequest) -> CSCGraph:
    n, e, seed, isolated = request.param
    return random_graph(n, e, seed, isolated=isolated)
