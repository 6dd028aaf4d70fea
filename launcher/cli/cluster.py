"""`graphtier cluster start|stop|status|join`: run the local daemon (graphtierd), look at it, and
join it to another daemon's cluster.

The daemon is started as a process (`python -m graphtier.service.daemon`) and reached over
gRPC; the CLI never imports it. Where a daemon keeps its files, the daemon says itself
(`graphtierd --print-files`), so its config is read and checked in one place."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from graphtier.contract.command_line import FlagTyper
from graphtier.launcher.cli.options import JsonOption, RuntimeDirOption
from graphtier.launcher.cli.rendering import (
    compact_table,
    console,
    emit_json,
    error_boundary,
    human_bytes,
    report_console,
)

if TYPE_CHECKING:
    from graphtier.contract.endpoints import DaemonFiles, Endpoints

app = FlagTyper(help="Start, stop and inspect the graphtier daemon on this machine.", no_args_is_help=True)
DAEMON_MODULE = "graphtier.service.daemon"  # run as a process, never imported here


def _runtime_dir(runtime_dir: Path | None) -> Path:
    from graphtier.contract.endpoints import default_runtime_dir

    return Path(os.path.abspath(runtime_dir)) if runtime_dir else default_runtime_dir()


def _log_tail(path: Path, offset: int, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:]) or "(the log is empty)"


def _alive(pid: int) -> bool:
    from graphtier.contract.processes import process_start_time  # not the data plane's shm: that loads torch

    return process_start_time(pid) is not None  # a zombie counts as gone


def _wait_ready(popen: subprocess.Popen[bytes], runtime_dir: Path, log_path: Path, offset: int, timeout: float):
    from graphtier.contract.endpoints import read_endpoints
    from graphtier.contract.errors import DaemonError
    from graphtier.launcher.client import DaemonClient

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = popen.poll()
        if code is not None:
            raise DaemonError(
                f"graphtierd exited with status {code} before it was ready; end of its log {log_path}:\n"
                + _log_tail(log_path, offset)
            )
        endpoints = read_endpoints(runtime_dir)
        if endpoints is not None and endpoints.pid == popen.pid:
            with DaemonClient(endpoints.grpc_target, http_url=endpoints.http_url) as client:
                with contextlib.suppress(DaemonError):
                    if client.health() == "SERVING":
                        return endpoints
        time.sleep(0.1)
    popen.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(10)
    raise DaemonError(
        f"graphtierd (pid {popen.pid}) was not serving after {timeout:.0f} s and was stopped; end of its log "
        f"{log_path}:\n" + _log_tail(log_path, offset)
    )


def daemon_command(argv: list[str]) -> list[str]:
    """The command line that runs graphtierd with `argv`, in this Python."""
    return [sys.executable, "-m", DAEMON_MODULE, *argv]


def daemon_files(argv: list[str]) -> DaemonFiles:
    """Where a daemon started with `argv` keeps its files. The daemon reads and checks its config
    and flags itself; DaemonConfigError with its message when they are wrong."""
    from graphtier.contract.endpoints import DaemonFiles
    from graphtier.contract.errors import DaemonConfigError

    done = subprocess.run(
        daemon_command([*argv, "--print-files"]), capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        prefix = "graphtierd: error: "
        problems = [line.removeprefix(prefix) for line in done.stderr.splitlines() if line.startswith(prefix)]
        raise DaemonConfigError(
            "\n".join(problems) or done.stderr.strip() or f"graphtierd exited with status {done.returncode}"
        )
    return DaemonFiles.model_validate_json(done.stdout)


def spawn_daemon(argv: list[str], timeout: float) -> tuple[subprocess.Popen[bytes], Endpoints]:
    """Start graphtierd with `argv` in the background, its output appended to its log, and wait
    until it serves; returns the process and its endpoints."""
    from graphtier.contract.endpoints import daemon_file_dir, describe_running, running_daemon_pid
    from graphtier.contract.errors import DaemonAlreadyRunningError

    files = daemon_files(argv)
    pid = running_daemon_pid(files.runtime_dir)
    if pid is not None:
        raise DaemonAlreadyRunningError(
            f"a graphtier daemon is already running for {files.runtime_dir} "
            f"({describe_running(files.runtime_dir, pid)}); stop it with `graphtier cluster stop`"
        )
    daemon_file_dir(files.log_file.parent, files.runtime_dir)
    offset = files.log_file.stat().st_size if files.log_file.exists() else 0
    with open(files.log_file, "ab") as log:
        popen = subprocess.Popen(
            daemon_command(argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    try:
        return popen, _wait_ready(popen, files.runtime_dir, files.log_file, offset, timeout)
    except KeyboardInterrupt:
        popen.terminate()
        raise


@app.command()
def start(
    foreground: Annotated[bool, typer.Option("--foreground", help="run in this terminal until Ctrl-C")] = False,
    http_port: Annotated[int | None, typer.Option("--http-port", help="status app port (0 = a free one)")] = None,
    http_host: Annotated[
        str | None,
        typer.Option(
            "--http-host",
            help="status app address (default 127.0.0.1: this machine only); it has no authentication and shows "
            "dataset paths and jobs to whoever reaches it",
        ),
    ] = None,
    tcp: Annotated[str | None, typer.Option("--tcp", help="also serve gRPC on HOST:PORT")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="YAML/JSON daemon config")] = None,
    dataset_root: Annotated[Path | None, typer.Option("--dataset-root", help="prepared datasets")] = None,
    runtime_dir: RuntimeDirOption = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait until the daemon serves")] = 120.0,
    json_out: JsonOption = False,
) -> None:
    """Start graphtierd in the background and wait until it serves; print its endpoints."""
    with error_boundary():
        flags = {
            "--config": config,
            "--runtime-dir": runtime_dir,
            "--http-port": http_port,
            "--http-host": http_host,
            "--tcp": tcp,
            "--dataset-root": dataset_root,
        }
        argv = [part for flag, value in flags.items() if value is not None for part in (flag, str(value))]
        if foreground:
            daemon_files(argv)  # a bad config is one line here, as in the background
            sys.stdout.flush()
            os.execv(sys.executable, daemon_command(argv))  # the daemon takes this process: Ctrl-C stops it
        _, endpoints = spawn_daemon(argv, timeout)
        if json_out:
            emit_json(endpoints)
            return
        report_console.print(f"[green]graphtierd is serving[/] (pid {endpoints.pid})")
        tcp = f"  tcp {endpoints.grpc_tcp}" if endpoints.grpc_tcp else ""
        report_console.print(f"  gRPC  {endpoints.grpc_target}{tcp}")
        report_console.print(f"  HTTP  {endpoints.http_url}  (dashboard /, /v1/status, /metrics)")
        report_console.print(f"  log   {endpoints.log_file}")


@app.command()
def stop(
    runtime_dir: RuntimeDirOption = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait after SIGTERM before SIGKILL")] = 20.0,
    json_out: JsonOption = False,
) -> None:
    """Stop the daemon: SIGTERM (it drains and cleans up), then SIGKILL after --timeout."""
    from graphtier.contract.endpoints import LOCK_FILE, running_daemon_pid
    from graphtier.contract.errors import DaemonError, DaemonNotRunningError

    with error_boundary():
        directory = _runtime_dir(runtime_dir)
        pid = running_daemon_pid(directory)
        if pid is None:
            raise DaemonNotRunningError(f"no graphtier daemon at {directory}; nothing to stop")
        if pid < 0:
            raise DaemonError(f"a daemon holds {directory / LOCK_FILE} but its pid is unreadable; stop it by hand")
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (_alive(pid) or running_daemon_pid(directory) is not None):
            time.sleep(0.05)
        killed = _alive(pid)
        if killed:
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
            _clean_after_kill(directory)
        if json_out:
            emit_json({"pid": pid, "stopped": True, "killed": killed})
        else:
            how = f"killed after {timeout:.0f} s without stopping" if killed else "stopped"
            console.print(f"graphtierd (pid {pid}) {how}")


def _clean_after_kill(directory: Path) -> None:
    """What a SIGTERM would have cleaned: stale files (taken under the lock) and segments."""
    from graphtier.contract.endpoints import remove_stale_daemon_files
    from graphtier.service.shm import reclaim_stale_segments

    remove_stale_daemon_files(directory)
    reclaim_stale_segments()


@app.command()
def status(runtime_dir: RuntimeDirOption = None, json_out: JsonOption = False) -> None:
    """Endpoints, pid, uptime, health and loaded datasets of the daemon, and every node of its cluster."""
    from graphtier.launcher.client import DaemonClient

    with error_boundary():
        with DaemonClient(runtime_dir=_runtime_dir(runtime_dir)) as client:
            health = client.health()
            snapshot = client.status()
            datasets = client.list_datasets()
            nodes = client.cluster_view().nodes
        endpoints = client.endpoints
        if json_out:
            emit_json(
                {
                    "pid": snapshot.pid,
                    "health": health,
                    "version": snapshot.version,
                    "started_at": snapshot.started_at.isoformat(),
                    "uptime_seconds": snapshot.uptime_seconds,
                    "endpoints": endpoints.model_dump(mode="json") if endpoints else None,
                    "datasets": [d.model_dump(mode="json") for d in datasets],
                    "jobs": [{"job_id": j.job_id, "state": j.state, "dataset": j.dataset} for j in snapshot.jobs],
                    "cluster": [n.model_dump(mode="json") for n in nodes],
                    "artifacts": snapshot.artifacts.model_dump(mode="json"),
                }
            )
            return
        uptime = f"up {snapshot.uptime_seconds:.0f} s"
        report_console.print(f"graphtierd pid {snapshot.pid}, {health}, {uptime}, v{snapshot.version}")
        security = snapshot.endpoints.tcp_security
        tcp = f"  tcp {snapshot.endpoints.grpc_tcp} ({security})" if snapshot.endpoints.grpc_tcp else ""
        report_console.print(f"  gRPC  unix:{snapshot.endpoints.grpc_unix}{tcp}")
        report_console.print(f"  HTTP  {snapshot.endpoints.http_url}")
        if endpoints:
            report_console.print(f"  log   {endpoints.log_file}")
        table = Table("dataset", "nodes", "edges", "resident", "jobs", title="loaded datasets")
        for d in datasets:
            resident = human_bytes(d.resident_bytes)
            table.add_row(d.name, str(d.num_nodes), str(d.num_edges), resident, ", ".join(d.job_ids))
        report_console.print(table if datasets else "  no datasets loaded")
        kept = snapshot.artifacts
        report_console.print(
            f"  exported models: {kept.kept_jobs} kept ({human_bytes(kept.kept_bytes)}), {kept.expired_jobs} removed "
            f"by the retention: {kept.policy}",
            highlight=False,
        )
        if len(nodes) > 1:
            report_console.print(_cluster_table(nodes))


@app.command()
def join(
    address: Annotated[str, typer.Argument(help="HOST:PORT of any daemon of the cluster to join (its --tcp)")],
    runtime_dir: RuntimeDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Join this machine's daemon to the cluster of the daemon at ADDRESS: that daemon and every node
    it lists admit it (checked with the cluster's token over TLS), and it keeps them as peers across
    restarts (<state_dir>/cluster-peers). Joining again changes nothing."""
    from graphtier.launcher.client import DaemonClient

    with error_boundary():
        with DaemonClient(runtime_dir=_runtime_dir(runtime_dir)) as client:
            nodes = client.join_cluster(address).nodes
        if json_out:
            emit_json({"joined": address, "cluster": [n.model_dump(mode="json") for n in nodes]})
            return
        console.print(f"joined the cluster of {address}: {len(nodes)} nodes")
        report_console.print(_cluster_table(nodes))


def _cluster_table(nodes) -> Table:
    """One row per node: health (or why not), load, memory, datasets with their versions."""
    table = compact_table(
        "node", "address", "health", "load 1/5/15", "cpus", "free", "jobs", "datasets", title="cluster"
    )
    problems = []
    for n in nodes:
        name = f"{n.name}*" if n.is_self else n.name
        if not n.serving:
            table.add_row(name, n.address, n.health, "", "", "", "", "")
            problems.append(f"  {n.describe()}: {n.message}")
            continue
        load = f"{n.load.load1:.1f}/{n.load.load5:.1f}/{n.load.load15:.1f}"
        sets = ", ".join(f"{d.name}@{d.version[:8]}" for d in n.datasets) or "-"
        table.add_row(
            name,
            n.address,
            n.health,
            load,
            str(n.load.cpus),
            human_bytes(n.load.memory_available_bytes),
            str(n.load.active_jobs),
            sets,
        )
    table.caption = "* this daemon" + ("\n" + "\n".join(problems) if problems else "")
    return table
