"""FeatureTiers validates boundaries, devices and tensor shapes, naming the bad values."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.errors import GraphtierError, PlacementError
from graphtier.service.gather import FeatureTiers


def tiers(**kw: object) -> FeatureTiers:
    args: dict[str, object] = dict(
        replicated_end=2,
        interleaved_end=5,
        host_end=8,
        num_rows=10,
        num_devices=2,
        device_index=1,
        resident=torch.zeros(8, 4),
        storage=torch.zeros(2, 4),
    )
    args.update(kw)
    return FeatureTiers(**args)  # type: ignore[arg-type]  # the fields by name, some wrong on purpose


def test_valid_layout_properties() -> None:
    t = tiers()
    assert t.boundaries == (2, 5, 8, 10) and t.row_bytes == 16 and t.row_shape == (4,) and t.dtype == torch.float32
    assert t.simulated
    assert (
        FeatureTiers.from_table(
            torch.zeros(10, 2, 3, dtype=torch.float16), replicated_end=0, interleaved_end=0, host_end=10
        ).row_bytes
        == 12
    )


@pytest.mark.parametrize(
    ("kw", "error", "shown"),
    [
        (dict(interleaved_end=1), PlacementError, "replicated_end=2, interleaved_end=1"),
        (dict(replicated_end=-1), PlacementError, "replicated_end=-1"),
        (dict(num_rows=7, storage=torch.zeros(0, 4)), PlacementError, "num_rows=7"),
        (dict(host_end=2.5), PlacementError, "host_end must be an int, got 2.5"),
        (dict(num_devices=0, device_index=0), PlacementError, "num_devices=0"),
        (dict(device_index=2), PlacementError, "device_index=2"),
        (dict(resident=torch.zeros(7, 4)), GraphtierError, "resident has 7 rows but host_end is 8"),
        (dict(storage=torch.zeros(3, 4)), GraphtierError, "storage has 3 rows but num_rows - host_end is 2"),
        (dict(storage=torch.zeros(2, 5)), GraphtierError, r"\(4,\).*\(5,\)"),
        (dict(storage=torch.zeros(2, 4, dtype=torch.float64)), GraphtierError, "float64"),
        (dict(resident=torch.zeros(4, 8).t()), GraphtierError, "contiguous"),
    ],
)
def test_invalid_layouts(kw: dict[str, object], error: type[Exception], shown: str) -> None:
    with pytest.raises(error, match=shown):
        tiers(**kw)


def test_from_table_rejects_host_end_beyond_table() -> None:
    with pytest.raises(PlacementError, match="host_end=11"):
        FeatureTiers.from_table(torch.zeros(10, 2), replicated_end=0, interleaved_end=0, host_end=11)
