"""The placement plan: which tier holds each feature row and which nodes' structure sits on device.

Nodes are numbered hottest first (see `hotness`), so each tier is a contiguous id range and
a row's tier follows from comparing its id with three boundaries, with no lookup table:

    [0, replicated_end)                 on every device
    [replicated_end, interleaved_end)   interleaved: row r on device (r - replicated_end) % num_devices
    [interleaved_end, host_end)         pinned host shared memory
    [host_end, num_nodes)               storage (memory-mapped file)

Graph structure has its own boundary: the in-neighbour lists (CSC) of nodes
[0, structure_device_end) are on every device; being the hottest nodes, their lists are a
prefix of `row`. The whole CSC stays in host shared memory too (the CPU sampler reads it, and
the GPU sampler reads the other nodes' lists there in place). Where one device budget must hold
both, the structure goes first (`fit_device_budget`: topology first, as XGNN places it). The
plan is a pydantic model so the daemon can hand it out as JSON.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphtier.contract.errors import PlacementError
from graphtier.service.placement.tier_budget import TierBudgets

_INDEX_BYTES = 8  # colptr and row are int64


class Tier(IntEnum):
    """Feature tiers, hottest first; the values are what `PlacementPlan.tier_of` returns."""

    DEVICE_REPLICATED = 0
    DEVICE_INTERLEAVED = 1
    HOST = 2
    STORAGE = 3


class TierSize(NamedTuple):
    """Rows in a tier and the bytes of one copy of them."""

    rows: int
    bytes: int


def _human(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    size = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def _structure_prefix(colptr: torch.Tensor, num_nodes: int, budget: int) -> tuple[int, int]:
    """(nodes, edges) of the longest node prefix whose colptr[0..k] and row[0:colptr[k]] fit `budget` bytes."""
    if colptr.dim() != 1 or colptr.dtype != torch.int64 or colptr.numel() != num_nodes + 1:
        raise PlacementError(
            f"colptr must be a 1-D int64 tensor of num_nodes + 1 = {num_nodes + 1} entries; "
            f"got {colptr.dtype} of shape {list(colptr.shape)}"
        )
    if int(colptr[0]) != 0 or bool((colptr[1:] < colptr[:-1]).any()):
        raise PlacementError("colptr must start at 0 and never decrease (it is not a CSC column pointer)")
    total = _INDEX_BYTES * (num_nodes + 1 + int(colptr[-1]))
    if budget > total:
        raise PlacementError(
            f"structure_device_bytes={budget} is larger than the {total} bytes of graph structure "
            f"({num_nodes + 1} colptr + {int(colptr[-1])} row entries of {_INDEX_BYTES} bytes)"
        )
    # cost[k-1] = bytes of the first k nodes' lists, k = 1..num_nodes; strictly increasing.
    cost = _INDEX_BYTES * (torch.arange(2, num_nodes + 2, dtype=torch.int64) + colptr[1:])
    nodes = int(torch.searchsorted(cost, torch.tensor(budget, dtype=torch.int64), right=True))
    return nodes, int(colptr[nodes])


class PlacementPlan(BaseModel):
    """Id boundaries of every tier for one prepared dataset (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_nodes: int = Field(ge=0, description="Nodes (= feature rows) in the dataset.")
    row_bytes: int = Field(ge=0, description="Bytes of one feature row (0 when the dataset has no features).")
    num_devices: int = Field(ge=0, description="Devices (real or accounted) the device tiers span; 0 = none.")
    replicated_end: int = Field(ge=0, description="Rows [0, replicated_end) are on every device.")
    interleaved_end: int = Field(
        ge=0, description="Rows [replicated_end, interleaved_end) are interleaved over the devices."
    )
    host_end: int = Field(
        ge=0, description="Rows [interleaved_end, host_end) are in pinned host memory; the rest on storage."
    )
    structure_device_end: int = Field(
        default=0, ge=0, description="Nodes [0, structure_device_end) have their in-neighbour lists on every device."
    )
    structure_device_edges: int = Field(
        default=0, ge=0, description="Row entries of those lists (= colptr[structure_device_end])."
    )

    @model_validator(mode="after")
    def _check_boundaries(self) -> PlacementPlan:
        a, b, c, n = self.replicated_end, self.interleaved_end, self.host_end, self.num_nodes
        if not a <= b <= c <= n:
            raise ValueError(
                "feature tier boundaries must satisfy replicated_end <= interleaved_end <= host_end <= num_nodes; "
                f"got {a} <= {b} <= {c} <= {n}"
            )
        if self.structure_device_end > n:
            raise ValueError(f"structure_device_end {self.structure_device_end} is past num_nodes {n}")
        if self.num_devices == 0 and (b > 0 or self.structure_device_end > 0):
            raise ValueError(
                f"num_devices is 0 but device tiers are not empty (interleaved_end {b}, "
                f"structure_device_end {self.structure_device_end})"
            )
        if self.num_devices and (b - a) % self.num_devices:
            raise ValueError(f"the interleaved tier's {b - a} rows do not split evenly over {self.num_devices} devices")
        if self.structure_device_end == 0 and self.structure_device_edges:
            raise ValueError(f"structure_device_edges is {self.structure_device_edges} for zero structure nodes")
        return self

    @classmethod
    def from_budgets(
        cls,
        budgets: TierBudgets,
        *,
        num_nodes: int,
        row_bytes: int,
        colptr: torch.Tensor | None = None,
    ) -> PlacementPlan:
        """Fill tiers hottest first: each gets the whole rows its budget holds.

        The interleaved tier rounds down to the same number of rows on every device. A budget
        larger than the data left for it is a PlacementError (`host_bytes=None` takes the rest).
        `colptr` (CSC, int64, num_nodes + 1) is needed when `structure_device_bytes > 0`.
        """
        if num_nodes < 0 or row_bytes < 0:
            raise PlacementError(f"num_nodes ({num_nodes}) and row_bytes ({row_bytes}) must be >= 0")
        devices = budgets.num_devices
        data = f"features ({num_nodes} rows x {row_bytes} bytes)"

        def rows_within(budget: int, name: str, first_row: int, after: str) -> int:
            left_bytes = (num_nodes - first_row) * row_bytes
            if budget > left_bytes:
                raise PlacementError(f"{name}={budget} is larger than the {left_bytes} bytes of {data} left{after}")
            return budget // row_bytes if row_bytes else 0

        replicated_end = rows_within(budgets.device_replicated_bytes, "device_replicated_bytes", 0, "")
        interleaved = rows_within(
            budgets.device_interleaved_bytes, "device_interleaved_bytes", replicated_end, " after the replicated tier"
        )
        interleaved_end = replicated_end + (interleaved // devices * devices if devices else 0)
        if budgets.host_bytes is None:
            host_end = num_nodes
        else:
            host_end = interleaved_end + rows_within(
                budgets.host_bytes, "host_bytes", interleaved_end, " after the device tiers"
            )

        structure_end = structure_edges = 0
        if colptr is not None:
            structure_end, structure_edges = _structure_prefix(colptr, num_nodes, budgets.structure_device_bytes)
        elif budgets.structure_device_bytes:
            raise PlacementError(
                f"structure_device_bytes={budgets.structure_device_bytes} needs the graph's colptr to place structure"
            )
        return cls(
            num_nodes=num_nodes,
            row_bytes=row_bytes,
            num_devices=devices,
            replicated_end=replicated_end,
            interleaved_end=interleaved_end,
            host_end=host_end,
            structure_device_end=structure_end,
            structure_device_edges=structure_edges,
        )

    def _check_ids(self, ids: torch.Tensor) -> None:
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise PlacementError(f"node ids must be an integer tensor, got {ids.dtype}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_nodes):
            raise PlacementError(
                f"node ids span [{int(ids.min())}, {int(ids.max())}] but the plan covers [0, {self.num_nodes})"
            )

    def tier_of(self, ids: torch.Tensor) -> torch.Tensor:
        """The `Tier` of every id (int8, same shape), by comparing ids with the boundaries."""
        self._check_ids(ids)
        tier = (ids >= self.replicated_end).to(torch.int8)
        tier += ids >= self.interleaved_end
        tier += ids >= self.host_end
        return tier

    def interleaved_location(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(device, row within that device's shard) of interleaved ids; (-1, -1) for other ids."""
        self._check_ids(ids)
        inside = (ids >= self.replicated_end) & (ids < self.interleaved_end)
        offset = ids.to(torch.int64) - self.replicated_end
        devices = max(self.num_devices, 1)
        minus_one = torch.full_like(offset, -1)
        return torch.where(inside, offset % devices, minus_one), torch.where(inside, offset // devices, minus_one)

    def structure_on_device(self, ids: torch.Tensor) -> torch.Tensor:
        """Boolean mask: whose in-neighbour lists are on the device."""
        self._check_ids(ids)
        return ids < self.structure_device_end

    @property
    def structure_device_bytes(self) -> int:
        """Bytes of structure on each device: colptr[0..end] and row[0:edges]."""
        if self.structure_device_end == 0:
            return 0
        return _INDEX_BYTES * (self.structure_device_end + 1 + self.structure_device_edges)

    def structure_host_bytes(self, num_edges: int) -> int:
        """Bytes of the CSC in host shared memory (all of it: colptr and `num_edges` row entries)."""
        return _INDEX_BYTES * (self.num_nodes + 1 + num_edges)

    def fit_device_budget(self, budget_bytes: int) -> tuple[PlacementPlan, str]:
        """This plan within `budget_bytes` per device, topology first: the structure tier stays and
        the coolest device feature rows move to the host tier (interleaved, then replicated) until
        it fits; with a note saying what moved ("" when nothing did). PlacementError when the
        structure tier alone is larger than the budget."""
        if self.device_bytes_per_device() <= budget_bytes:
            return self, ""
        room = budget_bytes - self.structure_device_bytes
        if room < 0:
            raise PlacementError(
                f"the device structure tier needs {self.structure_device_bytes} bytes per device but the device "
                f"budget is {budget_bytes} bytes; lower the structure budget"
            )
        rb, nd = self.row_bytes, max(self.num_devices, 1)  # rb > 0: without feature rows the structure fits
        if self.replicated_end * rb > room:
            replicated, share_rows = room // rb, 0
        else:
            replicated = self.replicated_end
            share_rows = min((self.interleaved_end - replicated) // nd, (room - replicated * rb) // rb)
        fitted = self.model_copy(update={"replicated_end": replicated, "interleaved_end": replicated + share_rows * nd})
        moved = self.interleaved_end - fitted.interleaved_end
        note = (
            f"topology first: the device structure tier ({_human(self.structure_device_bytes)}) and the feature "
            f"tiers did not fit the device budget of {_human(budget_bytes)}; {moved} device feature rows are in "
            "the host tier instead"
        )
        return fitted, note

    def tier_sizes(self, num_edges: int | None = None) -> dict[str, TierSize]:
        """Rows and bytes (of one copy) per feature tier, nodes/bytes of device structure and, given
        the graph's `num_edges`, of the host structure (nodes read from it, bytes of its whole CSC)."""
        rows = {
            "device_replicated": self.replicated_end,
            "device_interleaved": self.interleaved_end - self.replicated_end,
            "host": self.host_end - self.interleaved_end,
            "storage": self.num_nodes - self.host_end,
        }
        sizes = {name: TierSize(count, count * self.row_bytes) for name, count in rows.items()}
        sizes["structure_device"] = TierSize(self.structure_device_end, self.structure_device_bytes)
        if num_edges is not None:
            sizes["structure_host"] = TierSize(
                self.num_nodes - self.structure_device_end, self.structure_host_bytes(num_edges)
            )
        return sizes

    def device_bytes_per_device(self) -> int:
        """Bytes each device holds: replicated rows, its share of the interleaved rows, structure."""
        sizes = self.tier_sizes()
        share = sizes["device_interleaved"].bytes // self.num_devices if self.num_devices else 0
        return sizes["device_replicated"].bytes + share + self.structure_device_bytes

    def describe(self, num_edges: int | None = None) -> str:
        """A few lines for logs and the CLI: each tier's id range, rows and bytes (and, given the
        graph's `num_edges`, the structure in host memory)."""
        sizes = self.tier_sizes()
        ranges = {
            "device_replicated": (0, self.replicated_end, "on every device"),
            "device_interleaved": (self.replicated_end, self.interleaved_end, f"over {self.num_devices} devices"),
            "host": (self.interleaved_end, self.host_end, "pinned host memory"),
            "storage": (self.host_end, self.num_nodes, "memory-mapped file"),
        }
        lines = [f"placement of {self.num_nodes} nodes x {self.row_bytes} B feature rows, {self.num_devices} devices"]
        for name, (start, end, where) in ranges.items():
            size = sizes[name]
            span = f"[{start}, {end})"
            lines.append(f"  {name:<19} rows {span:<24} {size.rows:>12} rows {_human(size.bytes):>11}  {where}")
        lines.append(
            f"  {'structure_device':<19} nodes [0, {self.structure_device_end}) with {self.structure_device_edges} "
            f"edges, {_human(self.structure_device_bytes)} on every device"
        )
        if num_edges is not None:
            lines.append(
                f"  {'structure_host':<19} nodes [{self.structure_device_end}, {self.num_nodes}) read from the "
                f"whole CSC, {_human(self.structure_host_bytes(num_edges))} in host shared memory"
            )
        lines.append(f"  per device: {_human(self.device_bytes_per_device())}")
        return "\n".join(lines)
