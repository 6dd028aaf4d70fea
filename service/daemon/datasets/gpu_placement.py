"""Where a loaded dataset's device tiers go on this machine: real GPUs, or accounted only.

The daemon decides once per load. With `gpu_tiers: auto` and CUDA devices visible, a plan
spanning N devices is placed on GPUs 0..N-1 of the daemon (each tier its own allocation);
without devices it stays accounted and the layout says why. The interleaved tier needs every
pair of those GPUs to reach each other: where the peer matrix is incomplete its rows move to
the host tier and the layout's notes say so. Per GPU, the device tiers must fit the daemon's
device budget (default: the GPU's free memory less a reserve left for training). A device
structure tier (the hottest nodes' CSC lists) is placed too, topology first: where it and the
feature tiers do not both fit, the coolest device feature rows go to the host tier, and the
notes say how many.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from graphtier.contract.errors import InvalidRequestError
from graphtier.service.memory import DeviceMemoryMode, FdExporter
from graphtier.service.placement import PlacementPlan
from graphtier.service.placement.tier_budget import parse_budget

log = logging.getLogger("graphtier.daemon")


@dataclass(frozen=True)
class GpuDecision:
    """The plan to load, the GPUs holding its device tiers (empty = accounted) and why."""

    plan: PlacementPlan
    devices: tuple[int, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)


class GpuPlacement:
    """The daemon's policy: `mode` "auto" (real GPUs when there are any) or "off" (accounted)."""

    def __init__(
        self,
        *,
        mode: str = "auto",
        device_budget: str = "auto",
        device_reserve: str = "25%",
        device_memory: DeviceMemoryMode = "ipc",
        fd_socket: Path | None = None,
        fd_socket_gid: int | None = None,
    ) -> None:
        """`fd_socket`: where the daemon passes memory fds (read-write fds of its segments for GPUs
        that cannot register read-only host memory, VMM device tiers); served only when GPUs are
        visible, so a CPU-only daemon hands nobody a writable fd of its tiers."""
        self.mode = mode
        self.device_memory = device_memory  # how device tiers and device slots are shared: ipc handles or vmm fds
        self.fd_socket, self.fd_socket_gid = fd_socket, fd_socket_gid  # gid: the daemon's socket group
        self._exporter: FdExporter | None = None
        self.device_budget = device_budget
        self.device_reserve = device_reserve
        self._budgets: dict[int, int] = {}

    def budget_bytes(self, device: int) -> int:
        """Device-tier bytes the daemon may place on `device` (decided at first use, then fixed)."""
        if device not in self._budgets:
            from graphtier.service.gpu.runtime import mem_get_info

            free, total = mem_get_info(device)
            if self.device_budget == "auto":
                reserve = parse_budget(self.device_reserve, total_bytes=total, what="device_reserve")
                self._budgets[device] = max(0, free - reserve)
            else:
                self._budgets[device] = parse_budget(self.device_budget, total_bytes=total, what="device_budget")
            log.info(
                "device budget of GPU %d: %.2f GiB (free %.2f of %.2f GiB)",
                device,
                self._budgets[device] / 2**30,
                free / 2**30,
                total / 2**30,
            )
        return self._budgets[device]

    def fd_exporter(self) -> FdExporter | None:
        """The daemon's fd exporter (started on first use) when GPUs are visible and used; else None."""
        if self._exporter is None and self.fd_socket is not None and self.mode == "auto":
            from graphtier.service.gpu.runtime import device_count

            if device_count()[0] > 0:
                group = self.fd_socket_gid
                mode = 0o600 if group is None else 0o660
                self._exporter = FdExporter(str(self.fd_socket), mode=mode, gid=group)
        return self._exporter

    def close(self) -> None:
        """Stop passing fds (the datasets are unloaded first)."""
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None

    def budgets(self) -> dict[int, int]:
        """The budgets decided so far, by GPU."""
        return dict(self._budgets)

    def decide(self, plan: PlacementPlan, dataset: str) -> GpuDecision:
        """Where `plan`'s device tiers go; InvalidRequestError when they cannot fit this machine."""
        if plan.num_devices == 0 or (plan.interleaved_end == 0 and plan.structure_device_end == 0):
            return GpuDecision(plan)
        if self.mode == "off":
            return GpuDecision(plan, notes=("device tiers accounted: the daemon runs with gpu_tiers: off",))
        from graphtier.service.gpu.runtime import device_count

        count, why = device_count()
        if count == 0:
            return GpuDecision(plan, notes=(f"device tiers accounted, not placed: {why}",))
        if plan.num_devices > count:
            raise InvalidRequestError(
                f"dataset {dataset!r}: the budgets span {plan.num_devices} devices but this daemon sees {count} "
                f"GPU(s); ask for num_devices <= {count}"
            )
        devices = tuple(range(plan.num_devices))
        notes: list[str] = []
        if plan.interleaved_end > plan.replicated_end:
            from graphtier.service.store.device_tiers import peer_matrix_complete

            if not peer_matrix_complete(devices):
                rows = plan.interleaved_end - plan.replicated_end
                plan = plan.model_copy(update={"interleaved_end": plan.replicated_end})
                notes.append(
                    f"GPUs {list(devices)} cannot all reach each other (no peer access): the {rows} "
                    "interleaved rows are in the host tier instead"
                )
        budget = min(self.budget_bytes(device) for device in devices)
        if plan.structure_device_end:
            from graphtier.contract.errors import PlacementError

            try:
                plan, moved = plan.fit_device_budget(budget)
            except PlacementError as exc:
                raise InvalidRequestError(f"dataset {dataset!r}: {exc} or raise --device-budget") from None
            if moved:
                notes.append(moved)
        need = plan.device_bytes_per_device()
        for device in devices:
            budget = self.budget_bytes(device)
            if need > budget:
                raise InvalidRequestError(
                    f"dataset {dataset!r}: its device tiers need {need} bytes on GPU {device} but the daemon's "
                    f"device budget there is {budget} bytes; lower the device budgets or raise --device-budget"
                )
        return GpuDecision(plan, devices, tuple(notes))
