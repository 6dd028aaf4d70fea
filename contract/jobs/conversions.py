"""Conversions between the jobs half of `graphtier.v1` and the daemon's job types.

The companion of `conversions.py` (time, budgets, datasets, counters), kept apart to stay one
concept per module: job specs, jobs, job events and the ranks' progress reports. Zero values of the wire spec
mean "the default" as `jobs.proto` documents; the domain `JobSpec` then validates.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import partial
from typing import Any, get_args

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from pydantic import BaseModel

from graphtier.contract.conversions import (
    from_timestamp,
    storage_from_proto,
    storage_to_proto,
    timestamp,
    traffic_from_proto,
    traffic_to_proto,
)
from graphtier.contract.errors import InvalidReportError, InvalidRequestError
from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.jobs.progress import Phase, ProducerFigures, ProgressReport, TrainerFigures
from graphtier.contract.jobs.spec import JobSpec, ModelKind
from graphtier.contract.jobs.state import JobState
from graphtier.contract.jobs.view import (
    JobArtifactInfo,
    JobEvent,
    JobInfo,
    JobNodeInfo,
    JobPlacementInfo,
    JobProgressInfo,
    JobResultInfo,
    LogLine,
    RankInfo,
    StateChange,
)
from graphtier.contract.options import nested_model
from graphtier.v1 import common_pb2, jobs_pb2, progress_pb2


def state_to_proto(state: JobState) -> jobs_pb2.JobState:
    return jobs_pb2.JobState.Value(f"JOB_STATE_{state.name}")


def state_from_proto(value: int) -> JobState:
    """The state a request names; InvalidRequestError for a number the contract does not define."""
    try:
        return JobState[jobs_pb2.JobState.Name(value).removeprefix("JOB_STATE_")]
    except (ValueError, KeyError):
        known = ", ".join(name.removeprefix("JOB_STATE_") for name in jobs_pb2.JobState.keys()[1:])
        raise InvalidRequestError(f"unknown job state {value} (known: {known})") from None


# Specs: every field of the domain JobSpec travels under its own name (jobs.proto declares them in its
# order); an enum-coded one as the value named like its choice (model "sage": MODEL_SAGE), a nested
# model as its message. A wire field the domain model lacks is deprecated and refused when set.


def spec_to_proto(spec: JobSpec) -> jobs_pb2.JobSpec:
    message = jobs_pb2.JobSpec()
    model_to_message(spec, message)
    return message


def model_to_message(model: BaseModel, message: Message) -> None:
    """Set `message`'s fields from `model`'s of the same names; a None value leaves its field unset."""
    for name in type(model).model_fields:
        value, field = getattr(model, name), message.DESCRIPTOR.fields_by_name[name]
        if value is None:
            continue
        if field.message_type is not None:
            nested = getattr(message, name)
            nested.SetInParent()
            model_to_message(value, nested)
        elif field.enum_type is not None:
            setattr(message, name, field.enum_type.values_by_name[_enum_prefix(field) + value.upper()].number)
        elif field.is_repeated:
            getattr(message, name).extend(value)
        else:
            setattr(message, name, value)


def spec_values_from_proto(message: jobs_pb2.JobSpec) -> dict[str, Any]:
    """The fields the request set (zero = default left out), for `JobSpec.build` to validate."""
    values = message_values(message, JobSpec)
    if "model" not in values and not message.script:
        choices = ", ".join(get_args(ModelKind))
        values["model"] = f"model not set (choose {choices}, or name a script)"
    deprecated = [field for field in message.DESCRIPTOR.fields if _deprecated_set(message, field)]
    refused = [f"{field.name} {getattr(message, field.name)!r}" for field in deprecated]
    if refused:
        raise InvalidRequestError(
            f"SubmitJob: {' / '.join(refused)} are chosen by the coordinating daemon; submit with nnodes or nodes "
            "and leave them empty"
        )
    return values


def message_values(message: Message, model: type[BaseModel]) -> dict[str, Any]:
    """The values of `model`'s fields that `message` sets (a required one always), a nested model's as a
    mapping, for the model to validate."""
    values: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        if not (info.is_required() or _is_set(message, field)):
            continue
        value = getattr(message, name)
        if field.message_type is not None:
            nested = nested_model(info.annotation)
            assert nested is not None, f"{model.__name__}.{name}: a message on the wire is a model here"
            value = message_values(value, nested)
        elif field.enum_type is not None:
            named = field.enum_type.values_by_number.get(value)
            value = named.name.removeprefix(_enum_prefix(field)).lower() if named else f"unknown {name} {value}"
        elif field.is_repeated:
            value = list(value)
        values[name] = value
    return values


def _is_set(message: Message, field: FieldDescriptor) -> bool:
    """Whether `message` gives `field`: present (a field that tracks presence), else not zero or empty."""
    if field.is_repeated:
        return len(getattr(message, field.name)) > 0
    return message.HasField(field.name) if field.has_presence else bool(getattr(message, field.name))


def _deprecated_set(message: Message, field: FieldDescriptor) -> bool:
    return field.GetOptions().deprecated and _is_set(message, field)


def _enum_prefix(field: FieldDescriptor) -> str:
    """The prefix of an enum's value names, its zero value's name less UNSPECIFIED (MODEL_UNSPECIFIED: MODEL_)."""
    return field.enum_type.values_by_number[0].name.removesuffix("UNSPECIFIED")


def spec_from_proto(message: jobs_pb2.JobSpec) -> JobSpec:
    return JobSpec.build(spec_values_from_proto(message), source="SubmitJob")


# Jobs


def progress_to_proto(p: JobProgressInfo) -> jobs_pb2.JobProgress:
    return jobs_pb2.JobProgress(
        epoch=p.epoch,
        step_in_epoch=p.step_in_epoch,
        steps_per_epoch=p.steps_per_epoch,
        global_step=p.global_step,
        total_steps=p.total_steps,
        loss=p.loss,
        train_accuracy=p.train_accuracy,
        batches_per_second=p.batches_per_second,
        traffic=traffic_to_proto(p.traffic),
        storage=storage_to_proto(p.storage),
    )


def progress_from_proto(m: jobs_pb2.JobProgress) -> JobProgressInfo:
    return JobProgressInfo(
        epoch=m.epoch,
        step_in_epoch=m.step_in_epoch,
        steps_per_epoch=m.steps_per_epoch,
        global_step=m.global_step,
        total_steps=m.total_steps,
        loss=m.loss,
        train_accuracy=m.train_accuracy,
        batches_per_second=m.batches_per_second,
        traffic=traffic_from_proto(m.traffic),
        storage=storage_from_proto(m.storage),
    )


def best_to_proto(b: BestEvaluation) -> common_pb2.BestEvaluation:
    return common_pb2.BestEvaluation(**b.__dict__)


def best_from_proto(m: common_pb2.BestEvaluation) -> BestEvaluation:
    values = {name: getattr(m, name) for name in BestEvaluation.__dataclass_fields__}
    values["metrics"] = dict(m.metrics)
    return BestEvaluation(**values)


_EPOCH_FIGURES = ("train_loss", "train_accuracy", "batches_per_second", "epoch_seconds")  # unset = None


def epoch_to_proto(r: EpochRecord) -> common_pb2.EpochRecord:
    message = common_pb2.EpochRecord(epoch=r.epoch, step=r.step, metrics=r.metrics)
    for name in _EPOCH_FIGURES:
        if getattr(r, name) is not None:
            setattr(message, name, getattr(r, name))
    return message


def epoch_from_proto(m: common_pb2.EpochRecord) -> EpochRecord:
    figures = {name: getattr(m, name) if m.HasField(name) else None for name in _EPOCH_FIGURES}
    return EpochRecord(epoch=m.epoch, step=m.step, metrics=dict(sorted(m.metrics.items())), **figures)


def artifact_to_proto(a: JobArtifactInfo) -> jobs_pb2.JobArtifact:
    return jobs_pb2.JobArtifact(**a.__dict__)


def artifact_from_proto(m: jobs_pb2.JobArtifact) -> JobArtifactInfo:
    return JobArtifactInfo(**{name: getattr(m, name) for name in JobArtifactInfo.__dataclass_fields__})


def result_to_proto(r: JobResultInfo) -> jobs_pb2.JobResult:
    values = {**r.__dict__, "best": best_to_proto(r.best) if r.best is not None else None}
    return jobs_pb2.JobResult(**values)


def result_from_proto(m: jobs_pb2.JobResult) -> JobResultInfo:
    values = {name: getattr(m, name) for name in JobResultInfo.__dataclass_fields__}
    values["metrics"] = dict(m.metrics)
    values["best"] = best_from_proto(m.best) if m.HasField("best") else None
    return JobResultInfo(**values)


def job_to_proto(job: JobInfo) -> jobs_pb2.Job:
    message = jobs_pb2.Job(
        job_id=job.job_id,
        spec=spec_to_proto(job.spec),
        state=state_to_proto(job.state),
        message=job.message,
        created_at=timestamp(job.created_at),
        restarts=job.restarts,
        log_path=job.log_path,
        notes=job.notes,
        gpu_share=job.gpu_share,
        history=[epoch_to_proto(r) for r in job.history],
        dataset_version=job.dataset_version,
    )
    if job.artifact is not None:
        message.artifact.CopyFrom(artifact_to_proto(job.artifact))
    if job.placement is not None:
        message.placement.CopyFrom(jobs_pb2.JobPlacement(**job.placement.model_dump()))
    for node in job.nodes:
        part = message.nodes.add(
            node=node.node,
            address=node.address,
            node_rank=node.node_rank,
            job_id=node.job_id,
            state=state_to_proto(node.state),
            message=node.message,
            log_path=node.log_path,
        )
        if node.progress is not None:
            part.progress.CopyFrom(progress_to_proto(node.progress))
        part.ranks.extend(_rank_to_proto(r) for r in node.ranks)
    if job.started_at:
        message.started_at.CopyFrom(timestamp(job.started_at))
    if job.finished_at:
        message.finished_at.CopyFrom(timestamp(job.finished_at))
    if job.progress:
        message.progress.CopyFrom(progress_to_proto(job.progress))
    if job.result:
        message.result.CopyFrom(result_to_proto(job.result))
    if job.exit_code is not None:
        message.exit_code = job.exit_code
    if job.owner is not None:
        message.owner.CopyFrom(owner_to_proto(job.owner))
    message.ranks.extend(_rank_to_proto(r) for r in job.ranks)
    return message


def owner_to_proto(owner: JobOwner) -> jobs_pb2.JobOwner:
    return jobs_pb2.JobOwner(name=owner.name, uid=owner.uid)


def owner_from_proto(m: jobs_pb2.JobOwner) -> JobOwner | None:
    """The owner `m` names; None for an unset one (a job kept from before owners were recorded)."""
    if not m.name:
        return None
    return JobOwner(m.name, m.uid if m.HasField("uid") else None)


def _rank_to_proto(r: RankInfo) -> jobs_pb2.RankStatus:
    rank = jobs_pb2.RankStatus(
        rank=r.rank,
        trainer_pid=r.trainer_pid,
        producer_pid=r.producer_pid,
        global_step=r.global_step,
        batches_per_second=r.batches_per_second,
        ready_slots=r.ready_slots,
    )
    if r.last_report:
        rank.last_report.CopyFrom(timestamp(r.last_report))
    return rank


def _rank_from_proto(r: jobs_pb2.RankStatus) -> RankInfo:
    return RankInfo(
        rank=r.rank,
        trainer_pid=r.trainer_pid,
        producer_pid=r.producer_pid,
        global_step=r.global_step,
        batches_per_second=r.batches_per_second,
        ready_slots=r.ready_slots,
        last_report=from_timestamp(r.last_report) if r.HasField("last_report") else None,
    )


def placement_from_proto(m: jobs_pb2.JobPlacement) -> JobPlacementInfo:
    return JobPlacementInfo(
        nnodes=m.nnodes,
        node_rank=m.node_rank,
        rdzv_endpoint=m.rdzv_endpoint,
        rdzv_id=m.rdzv_id,
        coordinator=m.coordinator,
        coordinator_job_id=m.coordinator_job_id,
        local_addr=m.local_addr,
        dataset_version=m.dataset_version,
        peer_timeout_s=m.peer_timeout_s or 15.0,
        node_addresses=list(m.node_addresses),
    )


def _node_from_proto(m: jobs_pb2.JobNode) -> JobNodeInfo:
    return JobNodeInfo(
        node=m.node,
        address=m.address,
        node_rank=m.node_rank,
        job_id=m.job_id,
        state=state_from_proto(m.state) if m.state else JobState.PENDING,
        message=m.message,
        progress=progress_from_proto(m.progress) if m.HasField("progress") else None,
        ranks=[_rank_from_proto(r) for r in m.ranks],
        log_path=m.log_path,
    )


def job_from_proto(m: jobs_pb2.Job) -> JobInfo:
    spec_values = spec_values_from_proto(m.spec)
    return JobInfo(
        job_id=m.job_id,
        spec=JobSpec.build(spec_values, source=f"job {m.job_id}"),
        state=state_from_proto(m.state),
        message=m.message,
        created_at=from_timestamp(m.created_at),
        started_at=from_timestamp(m.started_at) if m.HasField("started_at") else None,
        finished_at=from_timestamp(m.finished_at) if m.HasField("finished_at") else None,
        progress=progress_from_proto(m.progress) if m.HasField("progress") else None,
        result=result_from_proto(m.result) if m.HasField("result") else None,
        ranks=[_rank_from_proto(r) for r in m.ranks],
        exit_code=m.exit_code if m.HasField("exit_code") else None,
        restarts=m.restarts,
        log_path=m.log_path,
        notes=list(m.notes),
        gpu_share=m.gpu_share,
        placement=placement_from_proto(m.placement) if m.HasField("placement") else None,
        nodes=[_node_from_proto(n) for n in m.nodes],
        history=[epoch_from_proto(r) for r in m.history],
        artifact=artifact_from_proto(m.artifact) if m.HasField("artifact") else None,
        dataset_version=m.dataset_version,
        owner=owner_from_proto(m.owner) if m.HasField("owner") else None,
    )


# Events

_STREAMS = {"stdout": jobs_pb2.LOG_STREAM_STDOUT, "stderr": jobs_pb2.LOG_STREAM_STDERR}


def event_to_proto(event: JobEvent) -> jobs_pb2.JobEvent:
    message = jobs_pb2.JobEvent(sequence=event.sequence, time=timestamp(event.time), job_id=event.job_id)
    if event.state_change is not None:
        change = event.state_change
        message.state_change.previous = state_to_proto(change.previous)
        message.state_change.current = state_to_proto(change.current)
        message.state_change.message = change.message
        if change.result is not None:
            message.state_change.result.CopyFrom(result_to_proto(change.result))
    elif event.progress is not None:
        message.progress.CopyFrom(progress_to_proto(event.progress))
    elif event.log is not None:
        line = event.log
        message.log.from_producer, message.log.stream, message.log.text = (
            line.from_producer,
            _STREAMS[line.stream],
            line.text,
        )
        if line.rank is not None:
            message.log.rank = line.rank
    return message


def event_from_proto(m: jobs_pb2.JobEvent) -> JobEvent:
    kind = m.WhichOneof("event")
    event = partial(JobEvent, sequence=m.sequence, time=from_timestamp(m.time), job_id=m.job_id)
    if kind == "state_change":
        c = m.state_change
        change = StateChange(
            state_from_proto(c.previous),
            state_from_proto(c.current),
            c.message,
            result_from_proto(c.result) if c.HasField("result") else None,
        )
        return event(state_change=change)
    if kind == "progress":
        return event(progress=progress_from_proto(m.progress))
    stream = "stderr" if m.log.stream == jobs_pb2.LOG_STREAM_STDERR else "stdout"
    line = LogLine(m.log.text, m.log.rank if m.log.HasField("rank") else None, m.log.from_producer, stream)
    return event(log=line)


# Progress reports


_TRAINER_SCALARS = (
    "epoch",
    "step_in_epoch",
    "global_step",
    "loss",
    "accuracy",
    "batches_per_second",
    "data_wait_seconds_total",
    "train_seconds_total",
    "steps_total",
    "model_bytes",
    "steps_per_epoch",
    "total_steps",
)
_PRODUCER_SCALARS = (
    "epoch",
    "batches_total",
    "seeds_total",
    "sampled_nodes_total",
    "sampled_edges_total",
    "sample_seconds_total",
    "gather_seconds_total",
    "wait_seconds_total",
    "ready_slots",
    "lag_batches",
    "slot_grows_total",
)


def report_to_proto(report: ProgressReport) -> progress_pb2.ProgressReport:
    message = progress_pb2.ProgressReport(
        job_id=report.job_id, rank=report.rank, pid=report.pid, time=timestamp(report.time)
    )
    figures = report.figures
    if isinstance(figures, TrainerFigures):
        message.reporter = progress_pb2.REPORTER_TRAINER
        trainer = message.trainer
        for name in _TRAINER_SCALARS:
            setattr(trainer, name, getattr(figures, name))
        trainer.phase = progress_pb2.Phase.Value(f"PHASE_{figures.phase.name}")
        for name in ("val_accuracy", "test_accuracy"):
            if getattr(figures, name) is not None:
                setattr(trainer, name, getattr(figures, name))
        trainer.eval_metrics.update(figures.eval_metrics)
        if figures.best is not None:
            trainer.best.CopyFrom(best_to_proto(figures.best))
        if figures.last_epoch is not None:
            trainer.last_epoch.CopyFrom(epoch_to_proto(figures.last_epoch))
    else:
        message.reporter = progress_pb2.REPORTER_PRODUCER
        producer = message.producer
        for name in _PRODUCER_SCALARS:
            setattr(producer, name, getattr(figures, name))
        producer.traffic.CopyFrom(traffic_to_proto(figures.traffic))
    return message


def report_from_proto(message: progress_pb2.ProgressReport) -> ProgressReport:
    """The domain report; InvalidReportError when the reporter is unset or its figures do not match it."""
    expected = {progress_pb2.REPORTER_TRAINER: "trainer", progress_pb2.REPORTER_PRODUCER: "producer"}
    kind = expected.get(message.reporter)
    if kind is None:
        raise InvalidReportError(f"report from pid {message.pid} for job {message.job_id!r} names no reporter kind")
    if message.WhichOneof("figures") != kind:
        raise InvalidReportError(
            f"report for job {message.job_id!r} rank {message.rank} is from a {kind} but carries "
            f"{message.WhichOneof('figures') or 'no'} figures"
        )
    figures: TrainerFigures | ProducerFigures
    if kind == "trainer":
        trainer = message.trainer
        figures = TrainerFigures(
            phase=Phase[progress_pb2.Phase.Name(trainer.phase).removeprefix("PHASE_")],
            val_accuracy=trainer.val_accuracy if trainer.HasField("val_accuracy") else None,
            test_accuracy=trainer.test_accuracy if trainer.HasField("test_accuracy") else None,
            eval_metrics=dict(trainer.eval_metrics),
            best=best_from_proto(trainer.best) if trainer.HasField("best") else None,
            last_epoch=epoch_from_proto(trainer.last_epoch) if trainer.HasField("last_epoch") else None,
            **{name: getattr(trainer, name) for name in _TRAINER_SCALARS},
        )
    else:
        producer = message.producer
        figures = ProducerFigures(
            traffic=traffic_from_proto(producer.traffic),
            **{name: getattr(producer, name) for name in _PRODUCER_SCALARS},
        )
    moment = from_timestamp(message.time) if message.HasField("time") else datetime.now(timezone.utc)
    return ProgressReport(job_id=message.job_id, rank=message.rank, pid=message.pid, time=moment, figures=figures)
