"""The environment variables graphtier reads, by name: one list for the daemon, its clients and a job's ranks."""

from __future__ import annotations

HOME_ENV = "GRAPHTIER_HOME"
"""The home of prepared datasets (`datasets/`) and of the daemon's files (`run/`, `state/`); default ~/.graphtier."""

RUNTIME_DIR_ENV = "GRAPHTIER_RUNTIME_DIR"
"""The runtime directory of the daemon a job's ranks belong to; the daemon sets it for them."""

JOB_ID_ENV = "GRAPHTIER_JOB_ID"
"""The job a rank belongs to; the daemon sets it for the job's ranks."""

JOB_TOKEN_ENV = "GRAPHTIER_JOB_TOKEN"
"""The job's secret, handed to its own processes only; their progress reports and channel requests carry it."""

SHM_NAMESPACE_ENV = "GRAPHTIER_SHM_NAMESPACE"
"""1 to 16 lowercase hex digits that prefix every shared-memory segment of this process tree."""

GPU_TIERS_ENV = "GRAPHTIER_GPU_TIERS"
"""The daemon's default for `gpu_tiers`: auto (device tiers on visible GPUs) or off (accounted only)."""

NO_NATIVE_ENV = "GRAPHTIER_NO_NATIVE"
"""Set to 1 to use the numpy/torch fallbacks instead of the C++ ops."""
