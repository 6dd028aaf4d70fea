"""A job as plain JSON-able data, read straight from the wire: what `graphtier job status --json` prints.

`graphtier job status` and `job list` answer from these documents so they load neither pydantic
nor the contract's models: only the generated jobs messages. The document has exactly the keys,
order and values of the job's contract form (`contract.jobs.view.JobInfo`, its spec and
placement dumped by pydantic in JSON mode; times as `str(datetime)`), which
`document_of(job)` gives for a `JobInfo` in hand: the wire message is the one form both
come from. `tests/launcher/client/test_job_document.py` holds the two together.
"""

from __future__ import annotations

from datetime import timezone
from typing import TYPE_CHECKING, Any

from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES

if TYPE_CHECKING:
    from graphtier.contract.jobs.view import JobInfo
    from graphtier.v1 import jobs_pb2

JobDocument = dict[str, Any]

# `JobSpec`'s fields in its order (model_dump's keys); the wire message names them alike.
SPEC_FIELDS = (
    "dataset",
    "model",
    "fanouts",
    "relation_fanouts",
    "batch_size",
    "hidden",
    "heads",
    "epochs",
    "lr",
    "weight_decay",
    "dropout",
    "nproc_per_node",
    "nnodes",
    "nodes",
    "device",
    "checkpoint_every_steps",
    "seed",
    "budgets",
    "max_restarts",
    "num_slots",
    "storage_reads",
    "window",
    "on_nonfinite",
    "features",
    "replicate",
    "sampler",
    "mps",
    "producer_sm_share",
    "task",
    "negatives",
    "negative_sampling",
    "decoder",
    "name",
    "script",
    "args",
)
BUDGET_FIELDS = ("num_devices", "device_replicated", "device_interleaved", "host", "structure_device")
PROGRESS_FIELDS = (
    "epoch",
    "step_in_epoch",
    "steps_per_epoch",
    "global_step",
    "total_steps",
    "loss",
    "train_accuracy",
    "batches_per_second",
)
RESULT_FIELDS = ("val_accuracy", "test_accuracy", "final_loss", "train_seconds", "checkpoint_path")
BEST_FIELDS = ("epoch", "selected_by", "val_accuracy", "test_accuracy")  # `BestEvaluation`'s, before its metrics
RANK_FIELDS = ("rank", "trainer_pid", "producer_pid", "global_step", "batches_per_second", "ready_slots")
PLACEMENT_FIELDS = (
    "nnodes",
    "node_rank",
    "rdzv_endpoint",
    "rdzv_id",
    "coordinator",
    "coordinator_job_id",
    "local_addr",
    "dataset_version",
    "peer_timeout_s",
    "node_addresses",
)
DEFAULT_PEER_TIMEOUT_S = 15.0  # JobPlacementInfo's default, which an unset wire value (0) means


def job_document(message: jobs_pb2.Job) -> JobDocument:
    """The document of one job the daemon sent (GetJob, ListJobs, SubmitJob, CancelJob)."""
    return {
        "job_id": message.job_id,
        "spec": _spec(message.spec),
        "state": _state(message.state),
        "message": message.message,
        "created_at": _time(message.created_at),
        "started_at": _time(message.started_at) if message.HasField("started_at") else None,
        "finished_at": _time(message.finished_at) if message.HasField("finished_at") else None,
        "progress": _progress(message.progress) if message.HasField("progress") else None,
        "result": _result(message.result) if message.HasField("result") else None,
        "ranks": [_rank(rank) for rank in message.ranks],
        "exit_code": message.exit_code if message.HasField("exit_code") else None,
        "restarts": message.restarts,
        "log_path": message.log_path,
        "notes": list(message.notes),
        "placement": _placement(message.placement) if message.HasField("placement") else None,
        "nodes": [_node(node) for node in message.nodes],
        "gpu_share": message.gpu_share,
    }


def document_of(job: JobInfo) -> JobDocument:
    """The document of a job already converted to the contract's form (a submit's or cancel's reply)."""
    from graphtier.contract.jobs.conversions import job_to_proto

    return job_document(job_to_proto(job))


def _time(stamp: Any) -> str:
    return str(stamp.ToDatetime(tzinfo=timezone.utc))


def _state(value: int) -> str:
    from graphtier.v1 import jobs_pb2

    return jobs_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def _spec(message: jobs_pb2.JobSpec) -> dict[str, Any]:
    """The spec as the daemon validated it: every field is on the wire, the enums by their names."""
    from graphtier.v1 import jobs_pb2

    spec: dict[str, Any] = {}
    for name in SPEC_FIELDS:
        value = getattr(message, name)
        if name == "model":
            value = jobs_pb2.Model.Name(value).removeprefix("MODEL_").lower()
        elif name == "device":
            value = jobs_pb2.Device.Name(value).removeprefix("DEVICE_").lower()
        elif name == "budgets":
            value = _budgets(value) if message.HasField("budgets") else None
        elif name in ("fanouts", "relation_fanouts", "nodes", "args"):
            value = list(value)
        spec[name] = value
    return spec


def _budgets(message: Any) -> dict[str, Any]:
    budgets = {name: getattr(message, name) for name in BUDGET_FIELDS}
    budgets["host"] = message.host if message.HasField("host") else None
    return budgets


def _progress(message: jobs_pb2.JobProgress) -> dict[str, Any]:
    progress: dict[str, Any] = {name: getattr(message, name) for name in PROGRESS_FIELDS}
    traffic = message.traffic
    progress["traffic"] = {
        **{
            source: {"rows": getattr(traffic, source).rows, "bytes": getattr(traffic, source).bytes}
            for source in SOURCES
        },
        "simulated": traffic.simulated,
    }
    storage = {name: getattr(message.storage, name) for name in StorageCounters.__dataclass_fields__}
    progress["storage"] = {**storage, "mode": message.storage.mode or StorageCounters.mode}
    return progress


def _result(message: jobs_pb2.JobResult) -> dict[str, Any]:
    return {
        **{name: getattr(message, name) for name in RESULT_FIELDS},
        "metrics": dict(message.metrics),
        "best": _best(message.best) if message.HasField("best") else None,
    }


def _best(message: Any) -> dict[str, Any]:
    return {**{name: getattr(message, name) for name in BEST_FIELDS}, "metrics": dict(message.metrics)}


def _rank(message: jobs_pb2.RankStatus) -> dict[str, Any]:
    rank: dict[str, Any] = {name: getattr(message, name) for name in RANK_FIELDS}
    rank["last_report"] = _time(message.last_report) if message.HasField("last_report") else None
    return rank


def _placement(message: jobs_pb2.JobPlacement) -> dict[str, Any]:
    placement: dict[str, Any] = {name: getattr(message, name) for name in PLACEMENT_FIELDS}
    placement["peer_timeout_s"] = message.peer_timeout_s or DEFAULT_PEER_TIMEOUT_S
    placement["node_addresses"] = list(message.node_addresses)
    return placement


def _node(message: jobs_pb2.JobNode) -> dict[str, Any]:
    return {
        "node": message.node,
        "address": message.address,
        "node_rank": message.node_rank,
        "job_id": message.job_id,
        "state": _state(message.state) if message.state else "pending",
        "message": message.message,
        "progress": _progress(message.progress) if message.HasField("progress") else None,
        "ranks": [_rank(rank) for rank in message.ranks],
        "log_path": message.log_path,
    }
