"""A rank that a launcher other than the daemon started finds its node's daemon and joins the job:
a user's `torchrun --nproc-per-node 2 train.py` (or plain `python train.py`) whose script calls
`graphtier.connect(dataset=...)`, or a Kubeflow TrainJob's torchrun, which sets only PET_* variables
for itself and RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR/PORT and
TORCHELASTIC_RUN_ID for its ranks (`rank_main --spec job.yaml`).

The daemon is the one of `$GRAPHTIER_RUNTIME_DIR`, else `$GRAPHTIER_HOME/run`, else
`/var/run/graphtier` (the DaemonSet's hostPath). The rank sends the job spec and its launch's
identity (AttachJob); the first rank of the launch on the node makes the node's part of the job
(producers and slots for this node's ranks), the others join it. The rank then proceeds exactly
as one the daemon started: GRAPHTIER_JOB_ID and the job token are set in its environment. The
ranks of a launch find their job through a secret the first of them made (launch_secret.py), and
the job is its user's: the daemon refuses anyone else's rank.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from graphtier.contract.endpoints import default_runtime_dir, read_endpoints
from graphtier.contract.environment import JOB_ID_ENV, JOB_TOKEN_ENV, RUNTIME_DIR_ENV
from graphtier.contract.errors import DaemonNotRunningError, GraphtierError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.launch_secret import launch_secret

NODE_DAEMON_DIR = Path("/var/run/graphtier")  # where the DaemonSet mounts the daemon's runtime directory


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    try:
        return int(raw) if raw else default
    except ValueError:
        raise GraphtierError(f"environment variable {name}={raw!r} is not an integer (torchrun sets it)") from None


def node_runtime_dir() -> Path:
    """The runtime directory of this node's daemon (see the module docstring)."""
    given = os.environ.get(RUNTIME_DIR_ENV)
    if given:
        return Path(given)
    for candidate in (default_runtime_dir(), NODE_DAEMON_DIR):
        if read_endpoints(candidate) is not None:
            return candidate
    raise DaemonNotRunningError(
        f"no graphtier daemon found for this rank: set {RUNTIME_DIR_ENV}, or run one at {default_runtime_dir()} or "
        f"{NODE_DAEMON_DIR} (the DaemonSet's hostPath)"
    )


def launch_identity() -> tuple[str, int, int]:
    """(launch id, node rank, agent pid) of this rank's launch: torchrun's run id and master address with
    the agent's pid (the ranks' parent), so two launches on one node never share a job even when they
    reuse a run id and port (torchrun's defaults `none` and 29500). A process no launcher started
    (no WORLD_SIZE: `python train.py`) is a launch of its own, and its own agent."""
    if "WORLD_SIZE" not in os.environ:
        pid = os.getpid()
        return f"single@{socket.gethostname()}/pid{pid}", 0, pid
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    where = f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"
    agent = os.getppid()
    return f"{run_id}@{where}/agent{agent}", _env_int("GROUP_RANK", 0), agent


def sized_for_launch(values: dict[str, Any], source: str) -> JobSpec:
    """The spec of `values` sized by the launch (nproc_per_node = LOCAL_WORLD_SIZE, nnodes = WORLD_SIZE /
    LOCAL_WORLD_SIZE); GraphtierError naming `source` and what disagrees."""
    local = _env_int("LOCAL_WORLD_SIZE", 1)
    world = _env_int("WORLD_SIZE", local)
    if local < 1 or world % local:
        raise GraphtierError(f"WORLD_SIZE={world} is not a multiple of LOCAL_WORLD_SIZE={local}")
    asked = values.get("nproc_per_node")
    if asked is not None and asked != local:
        raise GraphtierError(
            f"{source}: nproc_per_node {asked} but the launcher started {local} rank(s) "
            "per node (numProcPerNode / --nproc-per-node); make them agree"
        )
    values = {key: value for key, value in values.items() if key != "nodes"}
    return JobSpec.build({**values, "nproc_per_node": local, "nnodes": world // local}, source=source)


def launch_spec(path: Path) -> tuple[JobSpec, str, int]:
    """The spec of `path` sized by the launch, the launch's id and this node's rank (`launch_identity`)."""
    spec = JobSpec.from_yaml(path)
    values = spec.model_dump(exclude={"nodes"})
    if "nproc_per_node" not in spec.model_fields_set:
        values.pop("nproc_per_node")
    launch_id, node_rank, _ = launch_identity()
    return sized_for_launch(values, str(path)), launch_id, node_rank


def attach_spec(spec: JobSpec, launch_id: str, node_rank: int, agent_pid: int) -> tuple[str, Path]:
    """Join this node's part of the launch's job (the node's first rank makes it, the others find it by
    the launch's secret, `launch_secret.py`); sets GRAPHTIER_JOB_ID, GRAPHTIER_RUNTIME_DIR and the job
    token in the environment; returns (job id, runtime dir)."""
    runtime_dir = node_runtime_dir()
    secret = launch_secret(launch_id, agent_pid, alone="WORLD_SIZE" not in os.environ)
    with DaemonClient(runtime_dir=runtime_dir) as client:
        job, token = client.attach_job(spec, launch_id, node_rank, agent_pid, secret)
    os.environ[JOB_ID_ENV], os.environ[RUNTIME_DIR_ENV], os.environ[JOB_TOKEN_ENV] = job.job_id, str(runtime_dir), token
    return job.job_id, runtime_dir


def attach(spec_path: Path) -> tuple[str, Path]:
    """Join this node's part of the launch's job described by the YAML spec at `spec_path`."""
    spec, launch_id, node_rank = launch_spec(spec_path)
    return attach_spec(spec, launch_id, node_rank, launch_identity()[2])
