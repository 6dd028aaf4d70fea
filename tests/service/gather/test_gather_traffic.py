"""TrafficCounts arithmetic, derived figures and the simulated flag."""

from __future__ import annotations

import pytest

from graphtier.service.gather import SOURCES, SourceTraffic, TrafficCounts


def test_from_rows_and_derived_figures() -> None:
    c = TrafficCounts.from_rows([1, 2, 3, 4, 5], 100, simulated=True)
    assert c.host == SourceTraffic(4, 400)
    assert (c.total_rows, c.total_bytes, c.device_bytes) == (15, 1500, 600)
    assert c.hit_ratio == pytest.approx(0.4)
    d = c.to_dict()
    assert d["interleaved_peer"] == {"rows": 3, "bytes": 300}
    assert d["simulated"] is True and d["hit_ratio"] == pytest.approx(0.4) and d["total_bytes"] == 1500
    assert list(d)[:6] == list(SOURCES) and d["network"] == {"rows": 0, "bytes": 0}
    with_network = TrafficCounts.from_rows([1, 2, 3, 4, 5, 6], 100, simulated=True)
    assert with_network.network == SourceTraffic(6, 600) and with_network.hit_ratio == pytest.approx(600 / 2100)


def test_addition_and_sum_carry_simulated() -> None:
    real = TrafficCounts.from_rows([1, 0, 0, 0, 1], 8, simulated=False)
    sim = TrafficCounts.from_rows([0, 1, 1, 1, 0], 8, simulated=True)
    total = real + sim
    assert total.total_rows == 5 and total.total_bytes == 40 and total.simulated
    acc = TrafficCounts()
    acc += real
    acc += real
    assert acc.storage == SourceTraffic(2, 16) and not acc.simulated
    assert sum([real, sim, real]) == real + sim + real


def test_empty_counts() -> None:
    empty = TrafficCounts()
    assert empty.total_bytes == 0 and empty.hit_ratio == 0.0 and not empty.simulated
    with pytest.raises(ValueError, match="expected 5 row counts"):
        TrafficCounts.from_rows([1, 2], 4, simulated=False)
