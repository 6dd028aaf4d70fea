"""Tier budgets: how many bytes each memory tier may hold, read from what a user typed.

Budgets come from the CLI or a job config as text ("10%", "512MiB", "1.5GB", "4096", "0");
`parse_budget` turns one into bytes, and `TierBudgets` groups them, validated, for
`PlacementPlan.from_budgets`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from graphtier.contract.errors import PlacementError
from graphtier.contract.messages import describe_validation_error
from graphtier.contract.sizes import SIZE_UNITS, UNIT_HELP, split_size


def parse_budget(text: str | int, *, total_bytes: int, what: str) -> int:
    """Bytes meant by `text`: an integer, a size with a unit (KB/MB/GB/TB powers of 1000,
    KiB/MiB/GiB/TiB powers of 1024, case-insensitive), or a percentage of `total_bytes`.

    Fractions round down to whole bytes. Raises PlacementError naming `what` and the text
    when it is negative, has an unknown unit, or is a percentage over 100.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise PlacementError(f"{what}: budget {text!r} must be a byte count or text like '10%' or '512MiB'")
    if isinstance(text, int):
        if text < 0:
            raise PlacementError(f"{what}: budget {text} is negative; use 0 or more bytes")
        return text
    parsed = split_size(text)
    if parsed is None:
        problem = "is negative" if text.strip().startswith("-") else "is not a size"
        raise PlacementError(
            f"{what}: budget {text!r} {problem}; write a byte count ('4096'), a size ('512MiB', '1.5GB') "
            "or a percentage ('10%')"
        )
    number, unit = parsed
    if unit == "%":
        if number > 100:
            raise PlacementError(f"{what}: budget {text!r} is more than 100% of the {total_bytes} bytes it shares")
        return int(number * total_bytes / 100)
    scale = 1 if unit == "" else SIZE_UNITS.get(unit.lower())
    if scale is None:
        raise PlacementError(f"{what}: budget {text!r} has unknown unit {unit!r}; use {UNIT_HELP} or %")
    return int(number * scale)


class TierBudgets(BaseModel):
    """Byte budgets per tier; the plan fills tiers hottest first (replicated, interleaved, host).

    `num_devices` is how many GPUs the plan lays device tiers out for. On a machine without
    a GPU it may still be >= 1: the device tiers are then *accounted* (simulated) by the
    gather, so hit ratios and would-be PCIe bytes stay exact (DESIGN "Running without a GPU").
    `num_devices = 0` means no device tiers at all, and every device budget must be 0.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    device_replicated_bytes: int = Field(
        default=0, ge=0, description="Feature bytes held on EVERY device: the hottest rows, one copy per GPU."
    )
    device_interleaved_bytes: int = Field(
        default=0,
        ge=0,
        description="Feature bytes interleaved across the devices, TOTAL over all of them (each holds 1/num_devices).",
    )
    num_devices: int = Field(default=0, ge=0, description="GPUs (real or accounted) the device tiers span; 0 = none.")
    host_bytes: int | None = Field(
        default=None,
        ge=0,
        description="Feature bytes in pinned host shared memory; None = every row not on a device (no storage tier).",
    )
    structure_device_bytes: int = Field(
        default=0,
        ge=0,
        description="Bytes of graph structure (CSC colptr + row, int64) held on every device, hottest nodes first.",
    )

    @model_validator(mode="after")
    def _device_budgets_need_devices(self) -> TierBudgets:
        if self.num_devices == 0:
            used = {
                name: value
                for name, value in (
                    ("device_replicated_bytes", self.device_replicated_bytes),
                    ("device_interleaved_bytes", self.device_interleaved_bytes),
                    ("structure_device_bytes", self.structure_device_bytes),
                )
                if value
            }
            if used:
                raise ValueError(
                    f"num_devices is 0 but device budgets are set ({used}); set num_devices >= 1 "
                    "(accounted devices are allowed without a GPU) or make them 0"
                )
        return self

    @classmethod
    def parse(
        cls,
        *,
        feature_bytes: int,
        structure_bytes: int = 0,
        num_devices: int = 0,
        device_replicated: str | int = 0,
        device_interleaved: str | int = 0,
        host: str | int | None = None,
        structure_device: str | int = 0,
    ) -> TierBudgets:
        """Budgets from text; percentages are of `feature_bytes` (features) or `structure_bytes` (structure).

        Raises PlacementError for unreadable text or inconsistent budgets.
        """
        try:
            return cls(
                device_replicated_bytes=parse_budget(
                    device_replicated, total_bytes=feature_bytes, what="device replicated budget"
                ),
                device_interleaved_bytes=parse_budget(
                    device_interleaved, total_bytes=feature_bytes, what="device interleaved budget"
                ),
                num_devices=num_devices,
                host_bytes=None if host is None else parse_budget(host, total_bytes=feature_bytes, what="host budget"),
                structure_device_bytes=parse_budget(
                    structure_device, total_bytes=structure_bytes, what="device structure budget"
                ),
            )
        except ValidationError as exc:
            problems = describe_validation_error(exc, whole="budgets", inputs=False)
            raise PlacementError(f"tier budgets: {problems}") from None
