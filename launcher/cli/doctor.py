"""`graphtier doctor`: what this machine offers the data path, checked, not assumed."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from graphtier.launcher.cli.rendering import emit_json, error_boundary, human_bytes, report_console

_STYLE = {"ok": "green", "unavailable": "yellow", "failed": "bold red", "pending": "cyan"}


def doctor(
    json_out: Annotated[bool, typer.Option("--json", help="the MachineReport as JSON on stdout")] = False,
    no_cuda_probe: Annotated[
        bool, typer.Option("--no-cuda-probe", help="skip the checks that initialise CUDA (host registration, peers)")
    ] = False,
) -> None:
    """CUDA devices, host registration, peer access, NVLink, MPS, NVML counters, huge pages, /dev/shm."""
    from graphtier.service.hardware.doctor import build_report

    with error_boundary():
        report = build_report("skip" if no_cuda_probe else "inprocess")
    if json_out:
        emit_json(report)
        return
    torch_cuda = f"CUDA {report.torch_cuda_version}" if report.torch_cuda_version else "no CUDA"
    driver = (
        f"driver {report.driver_version} (CUDA {report.cuda_driver_version})"
        if report.driver_version
        else ("no NVIDIA driver")
    )
    report_console.print(
        f"[bold]{escape(report.hostname)}[/]: torch {report.torch_version} ({torch_cuda}), {driver}", highlight=False
    )
    report_console.print(f"[{'green' if report.cuda else 'yellow'}]{escape(report.summary)}[/]", highlight=False)
    if report.devices:
        devices = Table("gpu", "cuda", "name", "memory", "free", "cc", "SMs", title="devices")
        for d in report.devices:
            devices.add_row(
                str(d.index),
                "-" if d.cuda_index is None else str(d.cuda_index),
                escape(d.name),
                human_bytes(d.total_memory_bytes),
                human_bytes(d.free_memory_bytes),
                d.compute_capability or "-",
                "-" if d.sm_count is None else str(d.sm_count),
            )
        report_console.print(devices)
    if report.peer_access and len(report.peer_access) > 1:
        n = len(report.peer_access)
        peers = Table("cuda", *(str(j) for j in range(n)), title="peer access (row reads column)")
        for i, row in enumerate(report.peer_access):
            peers.add_row(str(i), *("-" if i == j else ("yes" if ok else "no") for j, ok in enumerate(row)))
        report_console.print(peers)
    checks = Table("check", "status", "reason", title="checks")
    for check in report.checks:
        style = _STYLE.get(check.status, "")
        checks.add_row(check.name, f"[{style}]{check.status}[/]", escape(check.reason))
    report_console.print(checks)
