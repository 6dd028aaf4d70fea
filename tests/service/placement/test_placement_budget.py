"""parse_budget and TierBudgets: sizes, units, percentages and the errors users see."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from graphtier.contract.errors import GraphtierError, PlacementError
from graphtier.service.placement import TierBudgets, parse_budget


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10%", 1_000),
        ("0.5%", 50),
        ("100%", 10_000),
        ("512MiB", 512 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("1.1GB", 1_100_000_000),  # exact decimal, not 1099999999 from a float
        ("2 kib", 2_048),
        ("3K", 3_000),
        ("1TiB", 2**40),
        ("4096", 4_096),
        ("4096B", 4_096),
        ("0", 0),
        (" 7 ", 7),
        ("2.9", 2),  # fractions of a byte round down
        (123, 123),
        (0, 0),
    ],
)
def test_parse_budget_values(text: str | int, expected: int) -> None:
    assert parse_budget(text, total_bytes=10_000, what="host budget") == expected


def test_percent_of_the_right_total_rounds_down() -> None:
    assert parse_budget("33%", total_bytes=10, what="x") == 3
    assert parse_budget("50%", total_bytes=0, what="x") == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-5", r"host budget: budget '-5' is negative"),
        ("-10%", r"'-10%' is negative"),
        (-1, r"host budget: budget -1 is negative"),
        ("5XB", r"'5XB' has unknown unit 'XB'"),
        ("12 bits", r"unknown unit 'bits'"),
        ("101%", r"'101%' is more than 100% of the 10000 bytes"),
        ("lots", r"'lots' is not a size"),
        ("", r"'' is not a size"),
        ("1e9", r"'1e9' is not a size"),
        ("1..5GB", r"not a size"),
        (True, r"budget True must be a byte count"),
        (1.5, r"budget 1.5 must be a byte count"),
    ],
)
def test_parse_budget_errors_name_what_and_text(text: object, message: str) -> None:
    with pytest.raises(PlacementError, match=message) as info:
        parse_budget(text, total_bytes=10_000, what="host budget")  # type: ignore[arg-type]  # wrong types on purpose
    assert isinstance(info.value, GraphtierError)
    assert str(info.value).startswith("host budget: ")


def test_tier_budgets_parse_uses_each_total() -> None:
    budgets = TierBudgets.parse(
        feature_bytes=1_000,
        structure_bytes=400,
        num_devices=2,
        device_replicated="10%",
        device_interleaved="200",
        host="1KB",
        structure_device="50%",
    )
    assert budgets == TierBudgets(
        device_replicated_bytes=100,
        device_interleaved_bytes=200,
        num_devices=2,
        host_bytes=1_000,
        structure_device_bytes=200,
    )
    assert TierBudgets.parse(feature_bytes=1_000).host_bytes is None


def test_tier_budgets_validation() -> None:
    with pytest.raises(ValidationError, match="num_devices is 0 but device budgets are set"):
        TierBudgets(device_interleaved_bytes=8)
    with pytest.raises(ValidationError, match="greater than or equal to 0"):
        TierBudgets(host_bytes=-1)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        TierBudgets(gpu_bytes=1)  # type: ignore[call-arg]  # a field it refuses, on purpose
    with pytest.raises(PlacementError, match="tier budgets: .*num_devices is 0 but device budgets"):
        TierBudgets.parse(feature_bytes=100, structure_bytes=100, structure_device="10%")
    with pytest.raises(PlacementError, match="device replicated budget: budget '3 parsecs'"):
        TierBudgets.parse(feature_bytes=100, num_devices=1, device_replicated="3 parsecs")
    # Accounted devices on a CPU-only machine are allowed: the gather simulates them.
    assert TierBudgets(num_devices=4, device_replicated_bytes=64).num_devices == 4
