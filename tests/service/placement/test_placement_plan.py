"""PlacementPlan: budgets -> boundaries (exact arithmetic), structure prefix, lookups, JSON, errors."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from graphtier.contract.errors import PlacementError
from graphtier.service.graph import build_csc
from graphtier.service.placement import PlacementPlan, Tier, TierBudgets, TierSize

ROW = 512  # 128 float32 features


def _plan(**budgets: int | None) -> PlacementPlan:
    return PlacementPlan.from_budgets(TierBudgets(**budgets), num_nodes=1_000, row_bytes=ROW)


def test_budgets_to_boundaries_exact() -> None:
    plan = _plan(
        device_replicated_bytes=10 * ROW + 100,  # 10 whole rows
        device_interleaved_bytes=103 * ROW,  # 103 rows -> 25 per device on 4 devices
        num_devices=4,
        host_bytes=300 * ROW + ROW - 1,  # 300 whole rows
    )
    assert (plan.replicated_end, plan.interleaved_end, plan.host_end) == (10, 110, 410)
    assert plan.tier_sizes() == {
        "device_replicated": TierSize(10, 10 * ROW),
        "device_interleaved": TierSize(100, 100 * ROW),
        "host": TierSize(300, 300 * ROW),
        "storage": TierSize(590, 590 * ROW),
        "structure_device": TierSize(0, 0),
    }
    assert plan.device_bytes_per_device() == (10 + 25) * ROW
    assert "rows [110, 410)" in plan.describe()


def test_host_none_takes_the_rest_and_no_devices_means_host_only() -> None:
    plan = _plan()
    assert (plan.replicated_end, plan.interleaved_end, plan.host_end) == (0, 0, 1_000)
    assert plan.tier_sizes()["storage"] == TierSize(0, 0)
    assert _plan(host_bytes=0).host_end == 0  # everything on storage


def test_percent_budgets() -> None:
    budgets = TierBudgets.parse(
        feature_bytes=1_000 * ROW, num_devices=3, device_replicated="10%", device_interleaved="25%", host="50%"
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=1_000, row_bytes=ROW)
    # 100 replicated rows; 250 interleaved round down to 249 (83 per device); 500 host rows.
    assert (plan.replicated_end, plan.interleaved_end, plan.host_end) == (100, 349, 849)
    all_on_device = TierBudgets.parse(feature_bytes=1_000 * ROW, num_devices=1, device_replicated="100%", host="0")
    assert PlacementPlan.from_budgets(all_on_device, num_nodes=1_000, row_bytes=ROW).replicated_end == 1_000


def test_tier_of_and_interleaved_location() -> None:
    plan = _plan(
        device_replicated_bytes=10 * ROW, device_interleaved_bytes=100 * ROW, num_devices=4, host_bytes=300 * ROW
    )
    ids = torch.tensor([0, 9, 10, 13, 14, 109, 110, 409, 410, 999])
    assert plan.tier_of(ids).tolist() == [0, 0, 1, 1, 1, 1, 2, 2, 3, 3]
    assert plan.tier_of(ids).dtype == torch.int8
    device, local = plan.interleaved_location(ids)
    assert device.tolist() == [-1, -1, 0, 3, 0, 3, -1, -1, -1, -1]
    assert local.tolist() == [-1, -1, 0, 0, 1, 24, -1, -1, -1, -1]
    many = torch.randint(0, 1_000, (10_000,))
    reference = torch.bucketize(many, torch.tensor([10, 110, 410]), right=True)
    assert torch.equal(plan.tier_of(many).long(), reference)
    assert int((plan.tier_of(many) == Tier.HOST).sum()) == int(((many >= 110) & (many < 410)).sum())


def test_lookups_reject_bad_ids() -> None:
    plan = _plan()
    with pytest.raises(PlacementError, match=r"ids span \[-1, 3\] but the plan covers \[0, 1000\)"):
        plan.tier_of(torch.tensor([3, -1]))
    with pytest.raises(PlacementError, match=r"ids span \[0, 1000\]"):
        plan.interleaved_location(torch.tensor([0, 1_000]))
    with pytest.raises(PlacementError, match="integer tensor, got torch.float32"):
        plan.tier_of(torch.tensor([1.0]))


@pytest.mark.parametrize(
    ("budgets", "message"),
    [
        (
            dict(device_replicated_bytes=1_000 * ROW + 1, num_devices=1),
            r"device_replicated_bytes=512001 is larger than the 512000 bytes of features \(1000 rows x 512 bytes\)",
        ),
        (
            dict(device_replicated_bytes=600 * ROW, device_interleaved_bytes=500 * ROW, num_devices=2),
            r"device_interleaved_bytes=256000 is larger than the 204800 bytes .* after the replicated tier",
        ),
        (
            dict(device_interleaved_bytes=900 * ROW, num_devices=2, host_bytes=101 * ROW),
            r"host_bytes=51712 is larger than the 51200 bytes .* after the device tiers",
        ),
    ],
)
def test_budget_larger_than_data_is_an_error(budgets: dict[str, int], message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        _plan(**budgets)


def test_no_features_accepts_only_zero_budgets() -> None:
    plan = PlacementPlan.from_budgets(TierBudgets(), num_nodes=5, row_bytes=0)
    assert (plan.replicated_end, plan.host_end) == (0, 5)
    with pytest.raises(PlacementError, match="larger than the 0 bytes"):
        PlacementPlan.from_budgets(TierBudgets(host_bytes=1), num_nodes=5, row_bytes=0)


def test_json_round_trip_and_rejected_inputs() -> None:
    plan = _plan(
        device_replicated_bytes=10 * ROW, device_interleaved_bytes=100 * ROW, num_devices=4, host_bytes=300 * ROW
    )
    assert PlacementPlan.model_validate_json(plan.model_dump_json()) == plan
    fields = json.loads(plan.model_dump_json())
    with pytest.raises(ValidationError, match=r"got 10 <= 110 <= 50 <= 1000"):
        PlacementPlan.model_validate_json(json.dumps({**fields, "host_end": 50}))
    with pytest.raises(ValidationError, match=r"got 10 <= 110 <= 1001 <= 1000"):
        PlacementPlan.model_validate_json(json.dumps({**fields, "host_end": 1_001}))
    with pytest.raises(ValidationError, match="101 rows do not split evenly over 4 devices"):
        PlacementPlan.model_validate_json(json.dumps({**fields, "interleaved_end": 111}))
    with pytest.raises(ValidationError, match="num_devices is 0 but device tiers are not empty"):
        PlacementPlan.model_validate_json(json.dumps({**fields, "num_devices": 0}))
    with pytest.raises(ValidationError, match="structure_device_end 1001 is past num_nodes 1000"):
        PlacementPlan.model_validate_json(json.dumps({**fields, "structure_device_end": 1_001}))
    with pytest.raises(ValidationError, match="Extra inputs"):
        PlacementPlan.model_validate_json(json.dumps({**fields, "gpu_end": 3}))


# In-neighbour lists: 0 <- [1, 2, 3], 1 <- [0], 2 <- [], 3 <- [0, 1], 4 <- [2].
SRC = torch.tensor([1, 2, 3, 0, 0, 1, 2])
DST = torch.tensor([0, 0, 0, 1, 3, 3, 4])


@pytest.mark.parametrize(
    ("budget", "nodes", "edges"),
    [
        (0, 0, 0),
        (39, 0, 0),  # node 0 needs colptr[0..1] + 3 row entries = 40 bytes
        (40, 1, 3),
        (63, 2, 4),  # node 2 (empty list) costs one more colptr entry: 64
        (64, 3, 4),
        (87, 3, 4),
        (88, 4, 6),
        (104, 5, 7),  # the whole structure: 6 colptr + 7 row entries
    ],
)
def test_structure_boundary_on_a_hand_made_csc(budget: int, nodes: int, edges: int) -> None:
    csc = build_csc(5, SRC, DST)
    assert csc.colptr.tolist() == [0, 3, 4, 4, 6, 7] and csc.row.tolist() == [1, 2, 3, 0, 0, 1, 2]
    budgets = TierBudgets(num_devices=1, structure_device_bytes=budget)
    plan = PlacementPlan.from_budgets(budgets, num_nodes=5, row_bytes=ROW, colptr=csc.colptr)
    assert (plan.structure_device_end, plan.structure_device_edges) == (nodes, edges)
    assert plan.tier_sizes()["structure_device"] == TierSize(nodes, 8 * (nodes + 1 + edges) if nodes else 0)
    assert plan.tier_sizes()["structure_device"].bytes <= budget
    # The device part of `row` is exactly the lists of nodes [0, nodes).
    assert bool((csc.dst_of_edges()[:edges] < nodes).all()) and bool((csc.dst_of_edges()[edges:] >= nodes).all())
    assert plan.structure_on_device(torch.arange(5)).tolist() == [v < nodes for v in range(5)]


def test_structure_errors() -> None:
    colptr = build_csc(5, SRC, DST).colptr
    too_big = TierBudgets(num_devices=1, structure_device_bytes=105)
    with pytest.raises(PlacementError, match=r"=105 is larger than the 104 bytes .*6 colptr \+ 7 row entries"):
        PlacementPlan.from_budgets(too_big, num_nodes=5, row_bytes=4, colptr=colptr)
    with pytest.raises(PlacementError, match="needs the graph's colptr"):
        PlacementPlan.from_budgets(TierBudgets(num_devices=1, structure_device_bytes=64), num_nodes=5, row_bytes=4)
    with pytest.raises(PlacementError, match=r"num_nodes \+ 1 = 6 entries; got torch.int64 of shape \[5\]"):
        PlacementPlan.from_budgets(TierBudgets(), num_nodes=5, row_bytes=4, colptr=colptr[:5])
    with pytest.raises(PlacementError, match="never decrease"):
        PlacementPlan.from_budgets(TierBudgets(), num_nodes=5, row_bytes=4, colptr=torch.tensor([0, 3, 2, 4, 6, 7]))


def test_structure_host_bytes_are_the_whole_csc_and_its_nodes_the_rest() -> None:
    csc = build_csc(5, SRC, DST)
    plan = PlacementPlan.from_budgets(
        TierBudgets(num_devices=1, structure_device_bytes=64), num_nodes=5, row_bytes=ROW, colptr=csc.colptr
    )
    assert "structure_host" not in plan.tier_sizes()  # the plan alone does not know the edge count
    sizes = plan.tier_sizes(num_edges=csc.num_edges)
    assert sizes["structure_device"] == TierSize(3, 8 * (3 + 1 + 4))
    assert sizes["structure_host"] == TierSize(2, 8 * (5 + 1 + 7))
    assert "structure_host      nodes [3, 5) read from the whole CSC, 104 B in host shared memory" in plan.describe(7)


def _fitting(replicated: int, interleaved: int, devices: int) -> PlacementPlan:
    colptr = torch.arange(0, 2 * 1_000 + 1, 2, dtype=torch.int64)  # every node 2 in-edges
    budgets = TierBudgets(
        num_devices=devices,
        device_replicated_bytes=replicated * ROW,
        device_interleaved_bytes=interleaved * ROW,
        structure_device_bytes=8 * (100 + 1 + 200),  # nodes [0, 100)
    )
    return PlacementPlan.from_budgets(budgets, num_nodes=1_000, row_bytes=ROW, colptr=colptr)


def test_topology_first_moves_interleaved_then_replicated_rows_to_host() -> None:
    plan = _fitting(replicated=100, interleaved=200, devices=2)  # per device: 100 + 100 rows + structure
    assert plan.fit_device_budget(plan.device_bytes_per_device()) == (plan, "")
    structure = plan.structure_device_bytes
    fitted, note = plan.fit_device_budget(structure + 150 * ROW + ROW - 1)
    assert (fitted.replicated_end, fitted.interleaved_end) == (100, 200)  # 50 rows per share stay
    assert fitted.structure_device_end == 100 and fitted.host_end == plan.host_end
    assert fitted.device_bytes_per_device() <= structure + 150 * ROW + ROW - 1
    assert note.startswith("topology first: the device structure tier (2.4 KiB)") and "100 device feature rows" in note
    fitted, _ = plan.fit_device_budget(structure + 40 * ROW)
    assert (fitted.replicated_end, fitted.interleaved_end) == (40, 40)  # no share left, the replica cut
    with pytest.raises(PlacementError, match=r"structure tier needs 2408 bytes per device .* budget is 2407 bytes"):
        plan.fit_device_budget(structure - 1)
