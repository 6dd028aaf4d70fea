"""A job as plain JSON-able data, read straight from the wire: what `graphtier job status --json` prints.

`graphtier job status` and `job list` answer from these documents so they load neither pydantic
nor the contract's models: only the generated jobs messages. The document has exactly the keys,
order and values of the job's contract form (`contract.jobs.view.JobInfo`, its spec and
placement dumped by pydantic in JSON mode; times as `str(datetime)`), which
`document_of(job)` gives for a `JobInfo` in hand: the wire message is the one form both
come from. The spec is read field by field from the message's descriptor (jobs.proto declares
`JobSpec`'s fields in its order). `tests/launcher/cli/test_job_document.py` holds the two together.
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
EPOCH_FIGURES = ("train_loss", "train_accuracy", "batches_per_second", "epoch_seconds")  # EpochRecord's, None if unset
ARTIFACT_FIELDS = ("state", "message", "bytes", "path")  # JobArtifactInfo's
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
        "spec": spec_document(message.spec),
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
        "history": [epoch_record(record) for record in message.history],
        "artifact": _artifact(message.artifact) if message.HasField("artifact") else None,
        "dataset_version": message.dataset_version,
        "owner": _owner(message.owner) if message.HasField("owner") and message.owner.name else None,
    }


def _owner(message: jobs_pb2.JobOwner) -> dict[str, Any]:
    return {"name": message.name, "uid": message.uid if message.HasField("uid") else None}


def document_of(job: JobInfo) -> JobDocument:
    """The document of a job already converted to the contract's form (a submit's or cancel's reply)."""
    from graphtier.contract.jobs.conversions import job_to_proto

    return job_document(job_to_proto(job))


def _time(stamp: Any) -> str:
    return str(stamp.ToDatetime(tzinfo=timezone.utc))


def _state(value: int) -> str:
    from graphtier.v1 import jobs_pb2

    return jobs_pb2.JobState.Name(value).removeprefix("JOB_STATE_").lower()


def spec_fields(descriptor: Any = None) -> tuple[str, ...]:
    """The keys of a spec's document: the message's fields in their order (jobs.proto declares `JobSpec`'s
    in its order), deprecated ones left out; `descriptor` defaults to JobSpec's."""
    if descriptor is None:
        from graphtier.v1 import jobs_pb2

        descriptor = jobs_pb2.JobSpec.DESCRIPTOR
    return tuple(field.name for field in _fields(descriptor))


def _fields(descriptor: Any) -> list[Any]:
    return [field for field in descriptor.fields if not field.GetOptions().deprecated]


def spec_document(message: Any) -> dict[str, Any]:
    """The spec as the daemon validated it, field by field as the contract dumps it: an enum by the name of
    its value (MODEL_SAGE: "sage"), a nested message as a mapping, an unset field that tracks presence as None."""
    spec: dict[str, Any] = {}
    for field in _fields(message.DESCRIPTOR):
        value = getattr(message, field.name)
        if field.is_repeated:
            value = list(value)
        elif field.has_presence and not message.HasField(field.name):
            value = None
        elif field.message_type is not None:
            value = spec_document(value)
        elif field.enum_type is not None:
            unspecified = field.enum_type.values_by_number[0].name  # MODEL_UNSPECIFIED: the prefix of every value
            value = field.enum_type.values_by_number[value].name.removeprefix(unspecified[: -len("UNSPECIFIED")])
            value = value.lower()
        spec[field.name] = value
    return spec


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


def epoch_record(message: Any) -> dict[str, Any]:
    """One epoch's record (`contract.jobs.history.EpochRecord`); an unset figure as None."""
    record: dict[str, Any] = {"epoch": message.epoch, "step": message.step}
    for name in EPOCH_FIGURES:
        record[name] = getattr(message, name) if message.HasField(name) else None
    record["metrics"] = dict(sorted(message.metrics.items()))  # by name: a wire map has no order
    return record


def _artifact(message: jobs_pb2.JobArtifact) -> dict[str, Any]:
    return {name: getattr(message, name) for name in ARTIFACT_FIELDS}


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
