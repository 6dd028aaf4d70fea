"""`JobManager`: submit, inspect, cancel and follow jobs; hand ranks their producer channels.

Submission validates the spec, loads the dataset (the shared copy: several jobs on one
dataset share its tiers), creates `<runtime_dir>/jobs/<id>/` and starts a `JobRunner` on its
own thread; the call returns at once with the job PENDING/STARTING. The job's record (state,
times, its saved Job message, retention) is the job table's; its processes are the runner's,
driven through the runner's public methods. The manager owns the job's event log and shows it
as `JobInfo` (job_view.py: from the job table, the progress tracker and the runner). A part
of a multi-node job (`submit_part`) is a job like any other plus its `PartHooks`
(cluster/part_watch.py): called every tick (a lost node fails the job), when the part fails
(the coordinator may restart the job on the nodes that remain: `_restart`), when the part ends
(the other nodes' parts are stopped), and when it is shown (every node's part).
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonError, InvalidRequestError, PreparedDatasetError
from graphtier.contract.identity import JobOwner
from graphtier.contract.jobs.conversions import job_to_proto
from graphtier.contract.jobs.directory import checkpoint_step, job_directory, job_log_path, job_spec_path
from graphtier.contract.jobs.progress import Phase
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.jobs.view import JobInfo, JobProgressInfo, StateChange
from graphtier.service.daemon.datasets.partitions import FetchAccess, PartitionCopies
from graphtier.service.daemon.datasets.registry import DatasetRegistry
from graphtier.service.daemon.jobs.admission import Admission, Demand, machine_capacity
from graphtier.service.daemon.jobs.artifacts import ArtifactPolicy, ArtifactStore
from graphtier.service.daemon.jobs.events import JobEventLog, ended_job_log
from graphtier.service.daemon.jobs.external_launch import ExternalAgent, ExternalLaunch
from graphtier.service.daemon.jobs.inference import resolve_inference
from graphtier.service.daemon.jobs.job_view import (
    final_rate,
    job_progress,
    job_result,
    producer_reports,
    rank0_done,
    rank_infos,
    stored_job,
)
from graphtier.service.daemon.jobs.memory_need import MemoryNeed, daemon_held_bytes, memory_need, refusal
from graphtier.service.daemon.jobs.mps import GpuShare, MpsControl
from graphtier.service.daemon.jobs.notes import (
    check_hetero_job,
    check_link_dataset,
    epoch_plan,
    spec_notes,
)
from graphtier.service.daemon.jobs.progress import ProgressTracker
from graphtier.service.daemon.jobs.runner import JobRunner
from graphtier.service.daemon.jobs.sampler_choice import gpu_sampler_unavailable, resolve_sampler
from graphtier.service.daemon.jobs.table import JobRecord, JobTable
from graphtier.service.pipeline.wire import ChannelGrant
from graphtier.service.placement import PlacementPlan
from graphtier.service.prepared.catalog import read_manifest
from graphtier.service.store import SharedDatasetHandle
from graphtier.service.store.wire import DatasetLayoutInfo

if TYPE_CHECKING:
    from collections.abc import Callable

    from graphtier.service.daemon.cluster.part_watch import PartHooks, Relaunch

log = logging.getLogger("graphtierd")
CANCEL_WAIT_S = 60.0


@dataclass
class _Job:
    """What the manager holds of one of its jobs; the record itself is the job table's."""

    spec: JobSpec
    runner: JobRunner
    events: JobEventLog
    layout: DatasetLayoutInfo  # the dataset version the job started with, for its ranks
    done: threading.Event = field(default_factory=threading.Event)
    last_progress: JobProgressInfo | None = None
    notes: list[str] = field(default_factory=list)
    part: PartHooks | None = None  # a part of a multi-node job: how it watches the other nodes
    gpu_share: GpuShare | None = None  # how its producers share the GPUs with its ranks
    memory_bytes: int | None = None  # under the daemon's memory limit: what the job adds (memory_need.py)


def check_script(script: Path) -> None:
    """InvalidRequestError naming `script` unless it is a readable file (a job's script, at submit)."""
    if not script.exists():
        raise InvalidRequestError(f"script {script}: no such file")
    if not script.is_file():
        raise InvalidRequestError(f"script {script}: not a file")
    if not os.access(script, os.R_OK):
        raise InvalidRequestError(f"script {script}: not readable by the daemon (uid {os.getuid()})")


def _split_rule(directory: Path) -> object:
    """How the prepared dataset in `directory` got its split (the manifest's record), or None."""
    try:
        return read_manifest(directory).source_description.get("split")
    except PreparedDatasetError:
        return None  # no readable dataset: loading it says why


def sizing_plan(handle: SharedDatasetHandle) -> PlacementPlan:
    """The plan a job's memory is sized from: a heterogeneous dataset keeps its rows per type, so the widest
    type's row bounds a slot's row (its own plan's row_bytes counts none)."""
    widest = max([handle.plan.row_bytes, *(ref.plan.row_bytes for ref in handle.hetero_features.values())])
    return handle.plan if widest == handle.plan.row_bytes else handle.plan.model_copy(update={"row_bytes": widest})


class JobManager:
    """Every job this daemon started; thread-safe."""

    def __init__(
        self,
        runtime_dir: Path,
        jobs: JobTable,
        datasets: DatasetRegistry,
        tracker: ProgressTracker,
        *,
        stall_timeout_s: float = 60.0,
        admission: Admission | None = None,
        keep_checkpoints: bool = False,
        mps: MpsControl | None = None,
        memory_limit: int | None = None,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        """`memory_limit`: bytes the daemon and its jobs may use (memory_need.py); None = no limit.
        `artifacts`: the jobs' exported models under the daemon's retention (default: its default policy)."""
        self.runtime_dir = Path(runtime_dir)
        self.mps = mps or MpsControl(self.runtime_dir)  # how CUDA jobs' producers share the GPUs
        self.stall_timeout_s = stall_timeout_s
        self.table, self.datasets, self.tracker = jobs, datasets, tracker
        self.partitions = PartitionCopies(datasets.root)  # partitioned jobs' rows on this node (FetchRows)
        self.fetch_access: FetchAccess | None = None  # set when the daemon joins its cluster
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._next_id = jobs.next_numeric_id()  # after every job in the store: ids are never reused
        self.admission = admission or Admission(machine_capacity(0, 2.0, torch.cuda.device_count()))
        self.keep_checkpoints = keep_checkpoints
        self.artifacts = artifacts or ArtifactStore(self.runtime_dir, jobs, ArtifactPolicy())
        self.memory_limit = memory_limit
        if memory_limit is not None:  # running jobs and a new one must fit what the limit leaves them
            self.admission.capacity = replace(self.admission.capacity, limit_room=lambda: memory_limit - self._held())
        self._attach_lock = threading.Lock()
        self._launches: dict[str, str] = {}  # digest of a launch's secret (ranks another launcher started) -> job id
        jobs.on_cancel(self._on_cancel)

    def _new_id(self) -> str:
        jobs_root = job_directory(self.runtime_dir, "0").parent  # every job's spec, log and checkpoints
        if not jobs_root.is_dir() or jobs_root.stat().st_mode & 0o077:
            jobs_root.mkdir(parents=True, exist_ok=True, mode=0o700)
            jobs_root.chmod(0o700)  # the daemon's user's alone: a socket-group member reads no other user's job log
        with self._lock:
            while job_directory(self.runtime_dir, str(self._next_id)).exists():
                self._next_id += 1
            job_id = str(self._next_id)
            self._next_id += 1
            job_directory(self.runtime_dir, job_id).mkdir(parents=True)
            return job_id

    def _job(self, job_id: str) -> _Job:
        self.table.get(job_id)  # UnknownJobError naming the id
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise DaemonError(f"job {job_id!r} is not managed by this daemon")
        return job

    # Submission and life cycle

    def submit(self, spec: JobSpec, owner: JobOwner) -> JobInfo:
        """Validate, load the dataset, and start the job, owned by `owner`, on its own thread."""
        if spec.multi_node:
            raise InvalidRequestError(
                f"job spec: nnodes {spec.nnodes} needs a daemon with peers (see `graphtierd --peer`)"
            )
        return self._submit(spec, None, owner)

    def submit_part(self, spec: JobSpec, hooks: Callable[[str], PartHooks], owner: JobOwner) -> JobInfo:
        """This node's part of a multi-node job; `hooks(job_id)` makes its watch over the other nodes."""
        return self._submit(spec, hooks, owner)

    def attach(
        self,
        spec: JobSpec,
        launch: ExternalLaunch,
        owner: JobOwner,
        may_join: Callable[[JobRecord], None],
    ) -> tuple[JobInfo, str]:
        """This node's part of a launch another launcher started (AttachJob): the job, made by the
        launch's first rank here and owned by `owner`, and its token. A later rank finds it by the
        launch's secret (never by its id, which anyone may guess) and joins it when `may_join` lets
        it (it raises otherwise: the caller is not the job's owner)."""
        with self._attach_lock:
            job_id = self._launches.get(launch.secret_digest)
            if job_id is not None and not self.table.get(job_id).state.final:
                record = self.table.get(job_id)
                may_join(record)
                return self.get(job_id), record.token
            info = self._submit(spec, None, owner, launch=launch)
            self._launches[launch.secret_digest] = info.job_id
            return info, self.table.get(info.job_id).token

    def _ranks_done(self, job_id: str, ranks: set[int]) -> bool:
        views = {v.rank: v for v in self.tracker.ranks(job_id)}
        return all(
            (view := views.get(r)) is not None and view.trainer is not None and view.trainer.phase == Phase.DONE
            for r in ranks
        )

    def _submit(
        self,
        spec: JobSpec,
        hooks: Callable[[str], PartHooks] | None,
        owner: JobOwner,
        launch: ExternalLaunch | None = None,
    ) -> JobInfo:
        gpu_share = self.mps.decide(spec)  # a mode this machine cannot give is refused before anything runs
        spec = spec.model_copy(update={"mps": gpu_share.mode})  # recorded resolved
        if spec.device == "cuda" and torch.cuda.device_count() < spec.nproc_per_node:
            raise InvalidRequestError(
                f"job spec: device 'cuda' needs one CUDA device per rank, but this machine's torch sees "
                f"{torch.cuda.device_count()} for nproc_per_node {spec.nproc_per_node}; "
                "submit with device cpu or fewer ranks"
            )
        if spec.sampler == "gpu" and (why := gpu_sampler_unavailable()):
            raise InvalidRequestError(
                f"job spec: sampler 'gpu' cannot run on this daemon: {why}; submit with sampler cpu or auto"
            )
        if spec.infers:  # the model's fields are the trained job's
            spec = resolve_inference(spec, self.table, self.runtime_dir)
        if spec.script and launch is None:  # an attached launch's ranks run their script themselves
            check_script(Path(spec.script))
        # a link job trains and evaluates on the edge split (chosen by --edge-split), not the node split;
        # inference applies a model trained on whatever split
        training_nodes = spec.task == "node" and not spec.infers
        unchosen = _split_rule(self.datasets.root / spec.dataset) if training_nodes else None
        if isinstance(unchosen, dict) and unchosen.get("asked") is False:
            raise InvalidRequestError(
                f"dataset {spec.dataset!r} has no split of its own, and nobody chose the random one it was "
                "prepared with (10/5/10 by default): prepare it again with the data's split (--split FILE), "
                "fractions (--train-fraction/--val-fraction/--test-fraction, --split-seed), or --default-split "
                "to accept it"
            )
        if spec.budgets is None and spec.dataset in {d.name for d in self.datasets.loaded()}:
            loaded = self.datasets.layout(spec.dataset)  # no budgets asked: share the copy as it is placed
        elif spec.budgets is None and spec.features == "partitioned" and hooks is not None:
            # the structure in shared memory, the feature rows left in their file: this node's rows
            # of the job live in its partition copy (PartitionCopies), the others on their owners
            loaded = self.datasets.load(spec.dataset, BudgetSpec(host="0")).layout
        else:
            loaded = self.datasets.load(spec.dataset, spec.budgets).layout
        check_hetero_job(spec, loaded.handle)
        if spec.task == "link":
            check_link_dataset(spec, loaded.handle)
        elif loaded.handle.hetero is not None:
            if loaded.num_classes < 2:
                raise DaemonError(f"dataset {spec.dataset!r} cannot be trained on: it has {loaded.num_classes} classes")
        elif loaded.num_classes < 2 or loaded.feature_dim < 1:
            raise DaemonError(
                f"dataset {spec.dataset!r} cannot be trained on: it needs features and at least 2 label classes "
                f"(feature_dim {loaded.feature_dim}, num_classes {loaded.num_classes})"
            )
        epoch_plan(spec, loaded.handle)  # refused here, not by its producers, when a rank would get no seed
        spec = resolve_sampler(spec, loaded.handle.plan)
        need = self._memory_need(spec, sizing_plan(loaded.handle))
        job_id = self._new_id()
        job_dir = job_directory(self.runtime_dir, job_id)
        job_spec_path(job_dir).write_text(spec.model_dump_json(indent=2))
        events = JobEventLog(job_id)
        part = hooks(job_id) if hooks is not None else None
        external = (
            None
            if launch is None
            else ExternalAgent(launch, job_dir, spec.nproc_per_node, lambda ranks: self._ranks_done(job_id, ranks))
        )
        partition = self.partitions.for_part(
            job_id, spec, part.placement if part else None, self.fetch_access, list(loaded.handle.hetero_features)
        )
        runner = JobRunner(
            job_id,
            spec,
            loaded.handle,
            job_dir,
            self.runtime_dir,
            events.log,
            stall_timeout_s=self.stall_timeout_s,
            placement=part.placement if part else None,
            external=external,
            partition=partition,
            device_memory=self.datasets.gpus.device_memory,
            gpu_share=gpu_share,
            storage_buffer_bytes=need.storage_budget if need is not None else None,
        )
        job = _Job(
            spec,
            runner,
            events,
            loaded,
            notes=spec_notes(spec, loaded.handle),
            part=part,
            gpu_share=gpu_share,
            memory_bytes=need.job_bytes if need is not None else None,
        )
        with self._lock:
            self._jobs[job_id] = job
        self.table.add(
            JobRecord(
                job_id=job_id,
                dataset=spec.dataset,
                world_size=spec.world_size,
                name=spec.name,
                token=runner.job_token,
                gpu_share=gpu_share.describe(),
                owner=owner,
            ),
            spec_json=spec.model_dump_json(),
        )
        events.state(StateChange(JobState.PENDING, JobState.PENDING, "accepted"))
        threading.Thread(target=self._run, args=(job_id, job), name=f"graphtier-job-{job_id}", daemon=True).start()
        return self.get(job_id)

    def _held(self) -> int:
        """What the daemon holds now under its memory limit: itself and every loaded dataset."""
        return daemon_held_bytes() + sum(d.resident_bytes for d in self.datasets.loaded())

    def _memory_need(self, spec: JobSpec, plan: PlacementPlan) -> MemoryNeed | None:
        """Under the memory limit: the job's need (its storage budget, what it adds), after refusing a
        job whose fixed need does not fit, naming the least that works; None without a limit."""
        if self.memory_limit is None:
            return None
        need = memory_need(spec, plan, limit=self.memory_limit, held=self._held())
        if not need.fits:
            host_tier = (plan.host_end - plan.interleaved_end) * plan.row_bytes
            raise InvalidRequestError(refusal(spec, plan, need, host_tier_bytes=host_tier))
        return need

    def _move(self, job_id: str, job: _Job, state: JobState, message: str = "") -> None:
        previous = self.table.get(job_id).state
        if previous == state or previous.final:
            return
        self.table.set_state(job_id, state, message)
        result = job_result(self.tracker, job_id, job.runner) if state == JobState.SUCCEEDED else None
        job.events.state(StateChange(previous, state, message, result))
        log.info("job %s: %s -> %s %s", job_id, previous.value, state.value, message)

    def _demand(self, job: _Job) -> Demand:
        """Cores, memory and GPUs the job will hold: its ranks, producers, agent and slots (memory_need.py;
        under a memory limit as its need was computed at submit, with its storage buffers as budgeted)."""
        spec, plan = job.spec, sizing_plan(job.layout.handle)
        local = spec.nproc_per_node  # this node's ranks (the other nodes' daemons admit theirs)
        memory = job.memory_bytes
        if memory is None:  # no limit: the fixed part, the least storage buffers
            memory = memory_need(spec, plan, limit=0, held=0).job_bytes
        return Demand(cores=local, memory_bytes=memory, gpus=local if spec.device == "cuda" else 0)

    def _queued(self, job_id: str, job: _Job, why: str) -> None:
        message = f"queued: {why}"
        self.table.set_state(job_id, JobState.PENDING, message)
        job.events.state(StateChange(JobState.PENDING, JobState.PENDING, message))

    def _run(self, job_id: str, job: _Job) -> None:
        if job.runner.external is not None:  # its ranks run already: the queue cannot hold them back
            self.admission.admit(job_id, self._demand(job))
        elif not self.admission.wait(
            job_id, self._demand(job), job.runner.cancelled, lambda why: self._queued(job_id, job, why)
        ):
            self._artifact_of(job_id, JobState.CANCELLED)
            self._move(job_id, job, JobState.CANCELLED, job.runner.cancel_reason or "cancelled while queued")
            self._keep(job_id)
            job.events.close()
            self.partitions.release(job_id)
            job.done.set()
            return
        try:
            self._supervise(job_id, job)
        finally:
            self.admission.done(job_id)

    def _supervise(self, job_id: str, job: _Job) -> None:
        self._move(job_id, job, JobState.STARTING)
        outcome, message, _ = "failed", "the job's supervisor crashed", None
        try:
            if job.gpu_share is not None:
                self.mps.acquire(job_id, job.gpu_share)  # a managed MPS control daemon runs while jobs need it
            restart = (lambda why: self._restart(job_id, job, why)) if job.part is not None else None
            settle = job.part.settle if job.part is not None else None
            outcome, message, _ = job.runner.run(lambda: self._tick(job_id, job), restart, settle)
        except Exception as exc:  # a bug: the job must still end, and say why
            log.exception("job %s: supervisor failed", job_id)
            message = f"the job's supervisor failed: {exc!r}"
        finally:
            self.mps.release(job_id)
            self._tick(job_id, job)
            outcome, message = self._end_part(job_id, job, outcome, message)
            self._prune_checkpoints(job, JobState(outcome))  # before the end is visible: no path that then vanishes
            self._artifact_of(job_id, JobState(outcome))  # before the end is visible: export works once it is
            self._move(job_id, job, JobState(outcome), message)
            self._keep(job_id)
            job.events.close()
            # the other nodes' producers may still ask for this node's rows a moment longer
            grace = job.part.placement.peer_timeout_s if job.part is not None else 0.0
            self.partitions.release(job_id, after_s=grace)
            job.done.set()

    def _restart(self, job_id: str, job: _Job, message: str) -> Relaunch | None:
        """A part of a multi-node job failed here with `message`: its next placement, when its coordinator
        restarts it (its processes here are stopped), announced in the job's events; else None."""
        assert job.part is not None
        checkpoints = job.runner.checkpoints()
        try:
            relaunch = job.part.restart(message, checkpoint_step(checkpoints[-1]) if checkpoints else None)
        except Exception:  # the job must still end, with its own cause
            log.exception("job %s: deciding its restart failed", job_id)
            return None
        if relaunch is None:
            return None
        self.tracker.new_placement(job_id)  # the old ranks' positions are not the new ones'
        job.spec, job.last_progress = relaunch.spec, None
        previous = self.table.get(job_id).state
        self.table.set_state(job_id, JobState.STARTING, relaunch.announcement)
        job.events.state(StateChange(previous, JobState.STARTING, relaunch.announcement))
        log.warning("job %s: %s", job_id, relaunch.announcement)
        return relaunch

    def _end_part(self, job_id: str, job: _Job, outcome: str, message: str) -> tuple[str, str]:
        """A part of a multi-node job ended here: the other nodes' parts are told, and the whole job's
        outcome decided (a lost node is the cause, not the symptom)."""
        if job.part is None:
            return outcome, message
        try:
            return job.part.finish(outcome, message)
        except Exception:  # the job must still end
            log.exception("job %s: ending its parts on the other nodes failed", job_id)
            return outcome, message

    def _keep(self, job_id: str) -> None:
        """Write the ended job, as GetJob shows it, to the job store (for `job status` after a restart)."""
        try:
            self.table.keep_ended(job_id, job_to_proto(self.get(job_id)).SerializeToString())
        except Exception:  # the history is worth a log line, not the job's outcome
            log.exception("job %s: cannot save it to the job store", job_id)

    def _prune_checkpoints(self, job: _Job, outcome: JobState) -> None:
        """None after a success (unless --keep-checkpoints), the newest after anything else."""
        if not self.keep_checkpoints:
            job.runner.prune_checkpoints(keep_newest=outcome != JobState.SUCCEEDED)

    def _artifact_of(self, job_id: str, outcome: JobState) -> None:
        """What the ended job exported, recorded and kept under the retention policy."""
        try:
            self.artifacts.job_ended(job_id, outcome)
        except Exception:  # the job's outcome stands; its model's fate is worth a log line
            log.exception("job %s: recording its exported model failed", job_id)

    def retire_finished(self, now: datetime | None = None) -> list[str]:
        """The jobs the job table finds due (ended more than its `retire_after_s` ago) whose supervision
        is over: answered from their saved Job message from now on, their per-job metric series folded
        away and their in-memory state dropped. Their ids."""
        retired = []
        for job_id in self.table.due_for_retirement(now):
            with self._lock:
                job = self._jobs.get(job_id)
            if job is None or not job.done.is_set():
                continue
            saved = self.table.ended_message(job_id) or job_to_proto(self.get(job_id)).SerializeToString()
            self.table.retire(job_id, saved)
            with self._lock:
                self._jobs.pop(job_id, None)
            self.tracker.forget(job_id)
            retired.append(job_id)
        return retired

    def _tick(self, job_id: str, job: _Job) -> None:
        """Producers' counters -> tracker; STARTING -> RUNNING at the first step; progress events."""
        if job.part is not None and not job.runner.cancelled.is_set():
            problem = job.part.watch()
            if problem:
                job.runner.fail(problem)
        for report in producer_reports(job_id, job.runner, job.part):
            self.tracker.record(report)
        progress = job_progress(self.tracker, job_id, job.spec, job.runner)
        if progress is None:
            return
        if progress.global_step > 0 and self.table.get(job_id).state == JobState.STARTING:
            self._move(job_id, job, JobState.RUNNING)
        if job.last_progress is None or (progress.global_step, progress.epoch) != (
            job.last_progress.global_step,
            job.last_progress.epoch,
        ):
            job.events.progress(progress)
        job.last_progress = progress

    # Queries

    def get(self, job_id: str) -> JobInfo:
        if job_id not in self._jobs and self.table.stored(job_id) is not None:
            return stored_job(self.table, job_id)
        job = self._job(job_id)
        record = self.table.get(job_id)
        done = rank0_done(self.tracker, job_id) or record.state == JobState.SUCCEEDED
        info = JobInfo(
            job_id=job_id,
            spec=job.spec,
            state=record.state,
            message=record.message,
            created_at=record.created_at,
            started_at=record.started_at,
            finished_at=record.finished_at,
            progress=final_rate(self.tracker, job_id, job.last_progress, record.state),
            result=job_result(self.tracker, job_id, job.runner) if done else None,
            ranks=rank_infos(self.tracker, job_id, job.runner),
            exit_code=job.runner.exit_code,
            restarts=job.runner.restarts,
            log_path=str(job.runner.log_path),
            notes=list(job.notes),
            gpu_share=record.gpu_share,
            history=self.table.history(job_id),
            artifact=self.table.artifact(job_id),
            dataset_version=job.layout.version,
            owner=record.owner,
        )
        return info if job.part is None else job.part.decorate(info)

    def job_layout(self, job_id: str, dataset: str) -> DatasetLayoutInfo:
        """The layout of the dataset copy job `job_id` trains on (the version it started with)."""
        job = self._job(job_id)
        if job.spec.dataset != dataset:
            raise InvalidRequestError(f"job {job_id} trains on dataset {job.spec.dataset!r}, not {dataset!r}")
        return job.layout

    def list(self, states: set[JobState] | None = None, dataset: str = "") -> list[JobInfo]:
        records = [
            r for r in self.table.list() if (not states or r.state in states) and (not dataset or r.dataset == dataset)
        ]
        return [self.get(r.job_id) for r in records if r.job_id in self._jobs or self.table.stored(r.job_id)]

    def events(self, job_id: str) -> JobEventLog:
        """The job's event log; for a job no longer supervised here (retired, or an earlier daemon's),
        its log lines read back from `jobs/<id>/job.log`."""
        self.table.get(job_id)  # UnknownJobError naming the id
        with self._lock:
            job = self._jobs.get(job_id)
        if job is not None:
            return job.events
        if self.table.stored(job_id) is None:
            raise DaemonError(f"job {job_id!r} is not managed by this daemon")
        return ended_job_log(job_id, job_log_path(job_directory(self.runtime_dir, job_id)))

    # Cancellation and channels

    def _on_cancel(self, record: JobRecord, reason: str) -> None:
        with self._lock:
            job = self._jobs.get(record.job_id)
        if job is not None:
            job.runner.cancel(reason)
            self.admission.wake()  # a queued job leaves the queue now

    def cancel(self, job_id: str, reason: str = "", *, wait_s: float = CANCEL_WAIT_S) -> JobInfo:
        """Cancel and wait until every process of the job is gone; DaemonError if it has ended."""
        job = self._job(job_id)
        self.table.request_cancel(job_id, reason or "cancelled by request")
        if not job.done.wait(wait_s):
            raise DaemonError(f"job {job_id}: its processes did not stop within {wait_s:g} s")
        return self.get(job_id)

    def open_channel(self, job_id: str, rank: int, trainer_pid: int) -> ChannelGrant:
        job = self._job(job_id)
        record = self.table.check_rank(job_id, rank)
        if record.state.final:
            raise DaemonError(f"job {job_id} has ended ({record.state.value}); its channels are closed")
        layout = job.runner.open_channel(rank, trainer_pid)
        return ChannelGrant(job_id, layout, job.layout.feature_dim, job.layout.num_classes, self.stall_timeout_s)

    def release_channel(self, job_id: str, rank: int) -> int:
        job = self._job(job_id)
        self.table.check_rank(job_id, rank)
        return job.runner.release_channel(rank)

    def shutdown(self) -> None:
        """Cancel every unfinished job and wait for its processes (the daemon is stopping)."""
        with self._lock:
            jobs = list(self._jobs.items())
        for job_id, _ in jobs:
            if not self.table.get(job_id).state.final:
                self.table.request_cancel(job_id, "the daemon is stopping")
        for _, job in jobs:
            job.done.wait(CANCEL_WAIT_S)
        self.partitions.close()
        self.mps.close()  # its managed control daemon, if one runs, stops with the jobs
