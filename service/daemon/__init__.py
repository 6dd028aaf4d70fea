"""graphtierd, the daemon: one per machine, serving one copy of each dataset to every job.

Modules, one concept each: `config` (DaemonConfig), `instance` (lock and endpoints file),
`datasets` (loaded datasets), `jobs` (the job table), `progress` (reports -> metrics),
`metrics` (the Prometheus registry), `job_manager`/`job_runner`/`job_events` (running jobs:
torchrun plus one producer per rank), `servicers` and `job_servicers` (the gRPC boundary),
`grpc_status` (errors -> status codes), `status`/`status_app`/`dashboard` (the HTTP side),
`server` (the `Daemon` wiring) and `main` (the `graphtierd` command). The types both the
daemon and its clients use (specs, views, errors, conversions) are the contract's:
`graphtier.contract`. The heavy modules are imported on first use, so `graphtierd` can
refuse a second start before importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DaemonConfig": "config",
    "Daemon": "server",
    "JobRecord": "jobs",
    "JobTable": "jobs",
    "JobManager": "job_manager",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
