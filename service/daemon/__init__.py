"""graphtierd, the daemon: one per machine, serving one copy of each dataset to every job.

Core modules: `config` (DaemonConfig), `instance` (lock and endpoints file), `server` (the
`Daemon` wiring), `main` (the `graphtierd` command), `servicers` (the dataset and progress
gRPC boundary), `credentials` and `wire_guard` (who may call and what a call may carry),
`systemd` (readiness and watchdog). One package per concept beside them: `datasets/` (the
loaded datasets), `jobs/` (running jobs: table, admission, torchrun and producers, progress),
`status/` (`/v1/status`, the live page), `cluster/` (the daemons of other machines), and
below those the two every other part may use: `rpc/` (errors -> gRPC status codes) and
`metrics/` (the metrics registry). The top-level modules compose the packages; no package
imports them back. The types both the
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
    "JobRecord": "jobs.table",
    "JobTable": "jobs.table",
    "JobManager": "jobs.manager",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
