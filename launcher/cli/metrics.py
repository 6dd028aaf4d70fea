"""`graphtier metrics`: the daemon's /v1/status as readable tables (or `--json`)."""

from __future__ import annotations

from typing import Annotated

import typer

from graphtier.launcher.cli.options import RuntimeDirOption, runtime_directory
from graphtier.launcher.cli.rendering import compact_table, emit_json, error_boundary, human_bytes, report_console


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _why_no_hits(snapshot) -> str:
    """Why the device hit ratio is 0 when no loaded dataset has device rows ('' otherwise)."""
    device = [t for d in snapshot.datasets for t in d.tiers if t.tier in ("device_replicated", "device_interleaved")]
    if not snapshot.datasets or any(t.rows for t in device):
        return ""
    return ": no device budget (every feature row is on the host tier; load with --num-devices and a device budget)"


def metrics(
    runtime_dir: RuntimeDirOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="the /v1/status JSON on stdout")] = False,
) -> None:
    """Per-tier hit ratio, bytes by tier and link, producer lag and throughput, per job."""
    from graphtier.launcher.client import DaemonClient

    with error_boundary():
        directory = runtime_directory(runtime_dir)
        with DaemonClient(runtime_dir=directory) as client:
            snapshot = client.status()
    if json_out:
        emit_json(snapshot)
        return
    traffic = snapshot.traffic
    where = "accounted (no GPU)" if snapshot.simulated_devices else "placed on GPUs"
    report_console.print(
        f"graphtierd pid {snapshot.pid}, up {snapshot.uptime_seconds:.0f} s; device tiers {where}\n"
        f"batches trained {snapshot.batches_total}; now {snapshot.batches_per_second:.2f} trained/s, "
        f"{snapshot.produced_batches_per_second:.2f} produced/s; producer lag {snapshot.producer_lag_batches}\n"
        f"hit ratio {_pct(traffic.hit_ratio)}{_why_no_hits(snapshot)}",
        highlight=False,
    )
    sources = compact_table("source", "rows", "bytes", "share", title="feature traffic by tier")
    for name, source in traffic.sources.items():
        sources.add_row(name, f"{source.rows:,}", human_bytes(source.bytes), _pct(source.share))
    everything = _pct(1.0 if traffic.total_bytes else 0.0)
    sources.add_row("total", f"{traffic.total_rows:,}", human_bytes(traffic.total_bytes), everything)
    report_console.print(sources)
    links = compact_table("link", "bytes", title="bytes by link")
    for link, nbytes in traffic.links.items():
        links.add_row(link, human_bytes(nbytes))
    report_console.print(links)
    measured = snapshot.measured
    if measured.pcie_rx_bytes is not None:
        methods = ", ".join(sorted({g.method for g in measured.gpus if g.method}))
        report_console.print(
            f"PCIe measured by NVML ({methods}): {human_bytes(measured.pcie_rx_bytes)} host to device, "
            f"beside {human_bytes(traffic.links.get('pcie', 0))} accounted",
            highlight=False,
        )
    else:
        reasons = measured.reason or "; ".join(f"GPU {g.gpu}: {g.unavailable_reason}" for g in measured.gpus)
        report_console.print(f"PCIe not measured: {reasons}", highlight=False)
    report_console.print(f"machine: {snapshot.machine.summary}", highlight=False)
    datasets = compact_table("dataset", "tier", "rows", "bytes", title="loaded datasets")
    for dataset in snapshot.datasets:
        for tier in dataset.tiers:
            datasets.add_row(dataset.name, tier.tier, f"{tier.rows:,}", human_bytes(tier.bytes))
    report_console.print(datasets if snapshot.datasets else "no datasets loaded")
    jobs = compact_table(
        "job",
        "state",
        "dataset",
        "ranks",
        "batches",
        "batches/s",
        "lag",
        "hit ratio",
        "gathered",
        title="jobs (batches/s: all ranks; last 10 s, or the whole run once ended)",
    )
    times = compact_table(
        "job",
        "sample s",
        "gather s",
        "train s",
        "data wait s",
        title="seconds by job, all ranks (-: no rank figures here: not started, retired, or an earlier daemon's)",
    )
    for job in snapshot.jobs:
        jobs.add_row(
            job.job_id,
            job.state,
            job.dataset,
            str(job.world_size),
            str(job.batches_total),
            f"{job.batches_per_second:.2f}",
            str(job.producer_lag_batches),
            _pct(job.traffic.hit_ratio),
            human_bytes(job.traffic.total_bytes),
        )
        times.add_row(  # a job with no ranks here (not started, retired, an earlier daemon's): unknown, not 0
            job.job_id,
            *(
                f"{sum(getattr(r, name) for r in job.ranks):.2f}" if job.ranks else "-"
                for name in ("sample_seconds", "gather_seconds", "train_seconds", "data_wait_seconds")
            ),
        )
    report_console.print(jobs if snapshot.jobs else "no jobs")
    if snapshot.jobs:
        report_console.print(times)
        report_console.print(_storage_table(snapshot))
        if any(job.network.peers for job in snapshot.jobs):
            report_console.print(_network_table(snapshot))


def _storage_table(snapshot):
    """How each job's storage-tier rows were served: read (and at what cost) or by the look-ahead window.
    Requests and times are in /metrics and /v1/status; this keeps to what fits 80 columns."""
    table = compact_table(
        "job",
        "mode",
        "window",
        "rows read",
        "bytes read",
        "window hits",
        "queue",
        "bandwidth",
        title="storage tier by job (bytes read: whole device requests)",
    )
    for job in snapshot.jobs:
        s = job.storage
        table.add_row(
            job.job_id,
            s.mode or "-",
            str(s.window) if s.window else "off",
            f"{s.read_rows:,}",
            human_bytes(s.read_bytes),
            f"{s.window_rows:,} ({_pct(s.window_hit_ratio)})",
            f"{s.queue_depth:.1f}",
            f"{human_bytes(s.bandwidth)}/s" if s.bandwidth else "-",
        )
    return table


def _network_table(snapshot):
    """A partitioned job's network tier: rows and bytes fetched from each peer node, the calls, and the
    time gathers waited for replies (0 when the look-ahead hides the fetches)."""
    table = compact_table("job", "peer", "rows", "bytes", "calls", "wait s", title="network tier by peer")
    for job in snapshot.jobs:
        for peer in job.network.peers:
            table.add_row(
                job.job_id,
                peer.peer,
                f"{peer.rows:,}",
                human_bytes(peer.bytes),
                f"{peer.requests:,}",
                f"{job.network.wait_seconds:.2f}",
            )
    return table
