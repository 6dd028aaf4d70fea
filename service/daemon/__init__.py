"""graphtierd, the daemon: one per machine, serving one copy of each dataset to every job.

Modules, one concept each: `config` (DaemonConfig), `instance` (lock and endpoints file),
`datasets` (loaded datasets), `jobs` (the job table), `progress` (reports -> metrics),
`metrics` (the Prometheus registry), `job_spec`/`job_manager`/`job_runner`/`job_events`/`job_view`
(running jobs: torchrun plus one producer per rank), `conversions`, `job_conversions`,
`servicers` and `job_servicers` (the gRPC boundary),
`grpc_status` (errors -> status codes), `status`/`status_models`/`status_app`/`dashboard`
(the HTTP side), `server` (the `Daemon` wiring) and `main` (the `graphtierd` command).
The heavy modules are imported on first use, so `graphtierd` can refuse a second start
before importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DaemonConfig": "config",
    "Endpoints": "instance",
    "read_endpoints": "instance",
    "running_daemon_pid": "instance",
    "Daemon": "server",
    "JobRecord": "jobs",
    "JobState": "jobs",
    "JobTable": "jobs",
    "JobSpec": "job_spec",
    "JobManager": "job_manager",
    "JobInfo": "job_view",
    "BudgetSpec": "models",
    "DatasetLayoutInfo": "models",
    "DatasetSummary": "models",
    "ProgressReport": "progress",
    "TrainerFigures": "progress",
    "ProducerFigures": "progress",
    "Phase": "progress",
    "DaemonStatus": "status_models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
