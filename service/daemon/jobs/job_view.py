"""How a job is shown: its progress, result and ranks, assembled from the progress tracker and its runner.

`JobManager` owns the jobs; these functions only read (the runner through `channel_stats()`
and `checkpoints()`). Producers' counters are turned into `ProducerFigures` reports here too
(what the tracker aggregates), and a job answered from its saved Job message (an earlier
daemon's, or a retired one) is shown from the job table as it ended.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from graphtier.contract.errors import DaemonError
from graphtier.contract.jobs.conversions import job_from_proto
from graphtier.contract.jobs.progress import Phase, ProducerFigures, ProgressReport
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.jobs.view import JobInfo, JobProgressInfo, JobResultInfo, RankInfo
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import TrafficCounts
from graphtier.v1 import jobs_pb2

if TYPE_CHECKING:
    from graphtier.service.daemon.cluster.part_watch import PartHooks
    from graphtier.service.daemon.jobs.progress import ProgressTracker
    from graphtier.service.daemon.jobs.runner import JobRunner
    from graphtier.service.daemon.jobs.table import JobTable


def producer_reports(job_id: str, runner: JobRunner, part: PartHooks | None) -> list[ProgressReport]:
    """A report of each of the job's producers, from its counters now."""
    reports = []
    for channel in runner.channel_stats():
        s = channel.stats
        figures = ProducerFigures(
            epoch=s.epoch,
            batches_total=s.batches_produced,
            sample_seconds_total=s.sample_s,
            gather_seconds_total=s.gather_s,
            wait_seconds_total=s.producer_wait_s,
            traffic=s.traffic,
            ready_slots=s.ready_slots,
            lag_batches=s.batches_produced - s.batches_consumed,
            slot_grows_total=s.slot_growths,
            seeds_total=s.seeds_total,
            sampled_nodes_total=s.sampled_nodes_total,
            sampled_edges_total=s.sampled_edges_total,
            storage=s.storage,
            network=s.network.by_address(part.placement.node_addresses if part else []),
        )
        reports.append(ProgressReport(job_id, channel.rank, channel.producer_pid, datetime.now(timezone.utc), figures))
    return reports


def job_progress(tracker: ProgressTracker, job_id: str, spec: JobSpec, runner: JobRunner) -> JobProgressInfo | None:
    """Where the job's trainers are (the slowest rank's step), their mean loss and accuracy, and the producers'
    traffic and storage reads."""
    views = tracker.ranks(job_id)
    trainers = [v.trainer for v in views if v.trainer is not None]
    traffic, storage = TrafficCounts(), None
    for view in views:
        if view.producer is not None:
            traffic = traffic + view.producer.traffic
            storage = view.producer.storage if storage is None else storage + view.producer.storage
    channels = runner.channel_stats()
    if not trainers and not channels:
        return None
    steps = channels[0].steps_per_epoch if channels else 0
    total = steps * spec.epochs
    if not channels:  # ranks that decide their own steps (an inference job's chunks of each layer)
        steps = max((t.steps_per_epoch for t in trainers), default=0)
        total = max((t.total_steps for t in trainers), default=0)
    count = max(len(trainers), 1)
    return JobProgressInfo(
        epoch=min((t.epoch for t in trainers), default=0),
        step_in_epoch=min((t.step_in_epoch for t in trainers), default=0),
        steps_per_epoch=steps,
        global_step=min((t.global_step for t in trainers), default=0),
        total_steps=total,
        loss=sum(t.loss for t in trainers) / count,
        train_accuracy=sum(t.accuracy for t in trainers) / count,
        batches_per_second=tracker.rates(job_id)[0],
        traffic=traffic,
        storage=storage or StorageCounters(mode=spec.storage_reads, window=spec.window),
    )


def job_result(tracker: ProgressTracker, job_id: str, runner: JobRunner) -> JobResultInfo | None:
    """Rank 0's final figures (the last epoch's and the best validation epoch's) and the newest checkpoint;
    None before rank 0 has reported."""
    rank0 = next((v.trainer for v in tracker.ranks(job_id) if v.rank == 0 and v.trainer), None)
    if rank0 is None:
        return None
    checkpoints = runner.checkpoints()
    return JobResultInfo(
        val_accuracy=rank0.val_accuracy or 0.0,
        test_accuracy=rank0.test_accuracy or 0.0,
        final_loss=rank0.loss,
        train_seconds=rank0.train_seconds_total,
        checkpoint_path=str(checkpoints[-1]) if checkpoints else "",
        metrics=dict(rank0.eval_metrics),
        best=rank0.best,
    )


def rank_infos(tracker: ProgressTracker, job_id: str, runner: JobRunner) -> list[RankInfo]:
    """Each rank's pids, step, rate and ready slots as last reported."""
    producers = {c.rank: c.producer_pid for c in runner.channel_stats()}
    ranks = []
    for view in tracker.ranks(job_id):
        trainer = view.trainer
        ranks.append(
            RankInfo(
                rank=view.rank,
                trainer_pid=view.trainer_pid,
                producer_pid=producers.get(view.rank, view.producer_pid),
                global_step=trainer.global_step if trainer else 0,
                batches_per_second=trainer.batches_per_second if trainer else 0.0,
                ready_slots=view.producer.ready_slots if view.producer else 0,
                last_report=view.last_report,
            )
        )
    return ranks


def rank0_done(tracker: ProgressTracker, job_id: str) -> bool:
    return any(v.rank == 0 and v.trainer and v.trainer.phase == Phase.DONE for v in tracker.ranks(job_id))


def final_rate(
    tracker: ProgressTracker, job_id: str, last: JobProgressInfo | None, state: JobState
) -> JobProgressInfo | None:
    """The latest progress; once the job has ended, with its batches/s over the whole run."""
    if last is None or not state.final:
        return last
    return replace(last, batches_per_second=tracker.rates(job_id, ended=True)[0])


def stored_job(table: JobTable, job_id: str) -> JobInfo:
    """A job answered from its saved Job message (an earlier daemon's, or a retired one): as it ended,
    or what is known of it."""
    record, stored = table.get(job_id), table.stored(job_id)
    if stored is None:
        raise DaemonError(f"job {job_id!r} is not managed by this daemon")
    # the curves and the exported model's state are the table's (retention may have removed the model since);
    # a job the table has none of keeps what its saved message holds
    history, artifact = table.history(job_id), table.artifact(job_id)
    if stored.job_proto:
        info = job_from_proto(jobs_pb2.Job.FromString(stored.job_proto))
        return replace(
            info,
            state=record.state,
            message=record.message,
            finished_at=record.finished_at,
            history=history or info.history,
            artifact=artifact or info.artifact,
        )
    return JobInfo(
        job_id=job_id,
        spec=JobSpec.model_validate_json(stored.spec_json),
        state=record.state,
        message=record.message,
        created_at=record.created_at,
        finished_at=record.finished_at,
        history=history,
        artifact=artifact,
    )
