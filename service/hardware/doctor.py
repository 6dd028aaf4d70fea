"""`MachineReport`: what this machine offers the data path, checked, not assumed.

`build_report("pending")` is the fork-safe part (NVML and the file system; no CUDA context):
the daemon computes it at start. `with_probe()` adds what only CUDA can tell (host
registration, peer access, SM counts), from `probe.run_cuda_probe` in the doctor's own
process or `probe.probe_in_subprocess` for the daemon.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import ModuleType
from typing import Literal, TypedDict

from graphtier.contract.machine import CHECK_NAMES, CheckResult, GpuDevice, MachineReport
from graphtier.service.hardware import nvml
from graphtier.service.hardware.host import check_dev_shm, check_mps, check_transparent_hugepages
from graphtier.service.hardware.probe import CudaProbe, probe_in_subprocess, run_cuda_probe

ProbeMode = Literal["inprocess", "subprocess", "pending", "skip"]


@dataclass
class _NvmlPart:
    devices: list[GpuDevice] = field(default_factory=list)
    driver: str | None = None
    cuda_driver: str | None = None
    error: str | None = None
    checks: list[CheckResult] = field(default_factory=list)


def _nvml_part() -> _NvmlPart:
    part, status = _NvmlPart(), "unavailable"
    try:
        with nvml.session() as nv:
            part.driver, part.cuda_driver = nvml.driver_versions(nv)
            try:
                found = nvml.gpus(nv)
            except nv.NVMLError as exc:
                part.error = f"NVML cannot enumerate devices: {nvml.describe(exc)}"
            else:
                part.devices = [g.device for g in found]
                part.checks = _counter_checks(nv, found)
    except nvml.NvmlUnavailable as exc:
        part.error = str(exc)
    except Exception as exc:  # a driver or nvidia-ml-py we did not foresee: the report still comes out
        part.error, status = f"NVML check failed: {type(exc).__name__}: {exc}", "failed"
    if part.error:
        part.checks = [
            CheckResult(name=n, status=status, reason=part.error)
            for n in ("nvlink", "nvml_pcie_counters", "nvml_nvlink_counters")
        ]
    return part


class _Links(TypedDict):
    active_links: list[int]
    remote_pci: dict[str, str | None]
    reason: str | None


class _Pcie(TypedDict):
    method: str | None
    nvml: str


class _Counted(TypedDict):
    links: list[int]
    reason: str | None


def _counter_checks(nv: ModuleType, found: list[nvml.Gpu]) -> list[CheckResult]:
    links: dict[str, _Links] = {}
    pcie: dict[str, _Pcie] = {}
    counted: dict[str, _Counted] = {}
    for gpu in found:
        active, why_none = nvml.active_nvlinks(nv, gpu.handle)
        remote = {str(link): nvml.nvlink_remote(nv, gpu.handle, link) for link in active}
        links[str(gpu.index)] = {"active_links": active, "remote_pci": remote, "reason": why_none}
        method, said = nvml.pcie_counters(nv, gpu.handle)
        pcie[str(gpu.index)] = {"method": method, "nvml": said}
        readable, why = nvml.nvlink_counters(nv, gpu.handle, active)
        counted[str(gpu.index)] = {"links": readable, "reason": why}
    if not found:
        none = "NVML sees no GPU"
        return [
            CheckResult(name=n, status="unavailable", reason=none)
            for n in ("nvlink", "nvml_pcie_counters", "nvml_nvlink_counters")
        ]
    active_total = sum(len(v["active_links"]) for v in links.values())
    nvlink = CheckResult(
        name="nvlink",
        status="ok" if active_total else "unavailable",
        details=links,
        reason=f"{active_total} active NVLink links: "
        + ", ".join(f"GPU {g}: {len(v['active_links'])}" for g, v in links.items())
        if active_total
        else _grouped({g: v["reason"] for g, v in links.items() if v["reason"]}),  # each GPU says why none
    )
    methods = {v["method"] for v in pcie.values()}
    status = "ok" if methods == {"field_values"} else "unavailable"
    pcie_reason = _grouped({g: f"{v['method'] or 'not measurable'}: {v['nvml']}" for g, v in pcie.items()})
    readable_total = sum(len(v["links"]) for v in counted.values())
    gaps = _grouped({g: v["reason"] for g, v in counted.items() if v["reason"] and links[g]["active_links"]})
    nvlink_counts = CheckResult(
        name="nvml_nvlink_counters",
        status="ok" if readable_total and not gaps else "unavailable",
        details=counted,
        reason=f"data counters of {readable_total} links read" + (f"; {gaps}" if gaps else "")
        if active_total
        else "no active NVLink link: nothing to count",
    )
    pcie_check = CheckResult(name="nvml_pcie_counters", status=status, details=pcie, reason=pcie_reason)
    return [nvlink, pcie_check, nvlink_counts]


def _grouped(said: dict[str, str]) -> str:
    """{'0': a, '1': a, '2': b} -> 'GPU 0,1: a; GPU 2: b' (eight identical GPUs make one clause)."""
    by_text: dict[str, list[str]] = {}
    for gpu, text in said.items():
        by_text.setdefault(text, []).append(gpu)
    return "; ".join(f"GPU {','.join(gpus)}: {text}" for text, gpus in by_text.items())


def _torch_versions() -> tuple[str, str | None]:
    import torch

    return torch.__version__, torch.version.cuda


def _devices_check(part: _NvmlPart, torch_version: str, torch_cuda: str | None) -> CheckResult:
    without = None if torch_cuda else f"torch {torch_version} is built without CUDA"
    details = {"kernel_driver": nvml.kernel_driver(), "nvml_error": part.error, "torch_cuda": torch_cuda}
    if part.error or not part.devices:
        why = "; ".join(w for w in (part.error or "NVML sees no GPU", without) if w)
        return CheckResult(name="cuda_devices", status="unavailable", reason=why, details=details)
    shown = ", ".join(
        f"{d.index}: {d.name} ({d.total_memory_bytes / 2**30:.1f} GiB, {d.free_memory_bytes / 2**30:.1f} free)"
        for d in part.devices
    )
    found = f"{len(part.devices)} GPU(s) [{shown}], driver {part.driver}, CUDA {part.cuda_driver}"
    if without:
        return CheckResult(name="cuda_devices", status="unavailable", reason=f"{found}; but {without}", details=details)
    return CheckResult(name="cuda_devices", status="ok", reason=found, details=details)


def _summary(devices: CheckResult, count: int) -> str:
    if devices.status == "ok":
        return f"{count} CUDA device(s): device tiers can be placed in GPU memory"
    which = "no usable CUDA device" if count else "no CUDA device"
    return f"{which}: device tiers will be accounted, not placed ({devices.reason})"


def _ordered(checks: list[CheckResult]) -> list[CheckResult]:
    by_name = {c.name: c for c in checks}
    return [by_name[n] for n in CHECK_NAMES if n in by_name]


def build_report(probe: ProbeMode = "skip", probe_timeout_s: float = 120.0) -> MachineReport:
    """The report; `probe` says how the CUDA checks run: in this process, in a subprocess,
    `pending` (the caller runs them later and calls `with_probe`), or `skip`."""
    part = _nvml_part()
    torch_version, torch_cuda = _torch_versions()
    devices = _devices_check(part, torch_version, torch_cuda)
    if devices.status != "ok":
        cuda = [
            CheckResult(name=n, status="unavailable", reason="no usable CUDA device (see cuda_devices)")
            for n in ("host_register", "peer_access")
        ]
    elif probe == "pending":
        cuda = [
            CheckResult(name=n, status="pending", reason="the CUDA probe subprocess has not answered yet")
            for n in ("host_register", "peer_access")
        ]
    else:
        cuda = [
            CheckResult(
                name=n,
                status="unavailable",
                reason="not checked here (CUDA would initialise in this process): run `graphtier doctor`",
            )
            for n in ("host_register", "peer_access")
        ]
    report = MachineReport(
        hostname=socket.gethostname(),
        checked_at=datetime.now(timezone.utc),
        cuda=devices.status == "ok",
        summary=_summary(devices, len(part.devices)),
        driver_version=part.driver,
        cuda_driver_version=part.cuda_driver,
        torch_version=torch_version,
        torch_cuda_version=torch_cuda,
        devices=part.devices,
        peer_access=None,
        checks=_ordered([devices, *cuda, *part.checks, check_mps(), check_transparent_hugepages(), check_dev_shm()]),
    )
    if report.cuda and probe == "inprocess":
        return with_probe(report, run_cuda_probe())
    if report.cuda and probe == "subprocess":
        return with_probe(report, probe_in_subprocess(probe_timeout_s))
    return report


def _key(uuid: str | None) -> str:
    return (uuid or "").lower().removeprefix("gpu-")


def _pci(bus_id: str) -> tuple[int, int, int] | None:
    try:  # '00000000:3B:00.0' -> (domain, bus, device)
        domain, bus, rest = bus_id.split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def with_probe(report: MachineReport, probe: CudaProbe) -> MachineReport:
    """`report` with the probe's checks, peer matrix, CUDA ordinals and SM counts merged in."""
    devices = []
    for device in report.devices:
        match = next(
            (
                f
                for f in probe.devices
                if (f.uuid and _key(f.uuid) == _key(device.uuid))
                or (f.pci is not None and f.pci == _pci(device.pci_bus_id))
            ),
            None,
        )
        devices.append(
            device
            if match is None
            else device.model_copy(update={"cuda_index": match.cuda_index, "sm_count": match.sm_count})
        )
    checks = {c.name: c for c in report.checks} | {c.name: c for c in probe.checks}
    cuda = report.cuda
    if report.cuda and not probe.devices:  # NVML sees GPUs, CUDA does not: the probe says why
        first = probe.checks[0]
        checks["cuda_devices"] = CheckResult(
            name="cuda_devices",
            status="failed" if first.status == "failed" else "unavailable",
            reason=f"NVML sees GPUs, CUDA not: {first.reason}",
        )
        cuda = False
    summary = _summary(checks["cuda_devices"], len(devices))
    return report.model_copy(
        update={
            "devices": devices,
            "peer_access": probe.peer_access,
            "cuda": cuda,
            "summary": summary,
            "checks": _ordered(list(checks.values())),
        }
    )


def log_lines(report: MachineReport) -> list[str]:
    """One line for the summary and one per check, as the daemon logs them."""
    return [f"machine: {report.summary}"] + [f"machine: {c.name} {c.status}: {c.reason}" for c in report.checks]
