"""What machine a benchmark ran on, where benchmarks keep their files, how they record figures and run jobs."""

from __future__ import annotations

import platform
import tempfile
from collections import deque
from pathlib import Path


def bench_cache(*parts: str) -> Path:
    """A folder for what benchmarks cache between runs (generated graphs, prepared datasets):
    under $TMPDIR (tempfile's choice), never in the repository."""
    return Path(tempfile.gettempdir(), "graphtier-bench", *parts)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or what `platform` knows)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def machine_summary() -> dict[str, object]:
    """CPU, cores, Python/torch versions and the load averages now: what a figure was measured on."""
    import os
    import sys

    summary: dict[str, object] = {
        "cpu": cpu_model(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        summary["torch"] = torch.__version__
    return summary


def write_figures(path: str | None, bench: str, figures: list[dict[str, object]], **context: object) -> None:
    """Write a bench's figures as JSON to `path` (nothing when None) for `python -m tests.bench.all`.

    Each figure is a dict with at least `name`, `value` and `unit`; ratios also name their
    `baseline` (measured in the same run) and, where the project has one, their `target`; a figure
    whose target is a most (a ratio of costs) says `"better": "lower"` (times in s or ms always are).
    """
    if path is None:
        return
    import json

    record = {"bench": bench, "machine": machine_summary(), "figures": figures, **context}
    with open(path, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")


def run_job_to_end(client: object, spec: object) -> object:
    """Submit `spec` through a `DaemonClient`, follow its events to the end and return the finished job;
    exits naming the job, its state and its message unless it succeeded (a bench's figure needs it)."""
    job = client.submit_job(spec)
    deque(client.job_events(job.job_id, follow=True), maxlen=0)  # follow the events to the job's end
    final = client.get_job(job.job_id)
    if final.state.value != "succeeded":
        raise SystemExit(f"job {job.job_id} {final.state.value}: {final.message}")
    return final
