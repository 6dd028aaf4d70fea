"""`ArtifactStore`: the exported models the daemon keeps, under its retention policy, and their export.

A job that succeeds leaves its exported model in `<job directory>/artifact/` (written by its ranks;
the format is `contract.jobs.artifact`'s). When a job ends, the store records what it left (kept,
with its size and what it is; or none, and why), removes what a job that did not succeed left, and
applies the retention policy: the newest `keep_jobs` succeeded jobs' models are kept, as long as
together they fit `budget_bytes`; older ones are removed, newest first kept, and each removal is
recorded with its reason, which `job export` then names. The policy is applied again when the
daemon starts (its limits may have changed). Only a job's own `artifact/` is ever removed (a
symbolic link there is unlinked, never followed); its log, spec and checkpoints stay.

Checkpoints are a restart mechanism with their own retention (`--keep-checkpoints`); artifacts
outlive them. The job table keeps each job's artifact state (`JobTable.set_artifact`).
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path

from graphtier.contract.errors import DaemonError, GraphtierError
from graphtier.contract.jobs.artifact import (
    artifact_bytes,
    artifact_dir,
    artifact_files,
    read_manifest,
    remove_artifact,
)
from graphtier.contract.jobs.directory import job_directory
from graphtier.contract.jobs.state import JobState, job_id_order
from graphtier.contract.jobs.view import JobArtifactInfo
from graphtier.service.daemon.jobs.table import JobTable

log = logging.getLogger("graphtierd")

KEPT, EXPIRED, NONE = "kept", "expired", "none"


def _size(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("B", "KiB", "MiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


@dataclass(frozen=True)
class ArtifactPolicy:
    """How many succeeded jobs' models are kept (`keep_jobs`, 0 = none) and in how many bytes
    together (`budget_bytes`, None = no byte limit)."""

    keep_jobs: int = 20
    budget_bytes: int | None = 10 << 30

    def describe(self) -> str:
        budget = "no byte limit" if self.budget_bytes is None else f"at most {_size(self.budget_bytes)} together"
        return f"the newest {self.keep_jobs} succeeded jobs' models, {budget}"


@dataclass(frozen=True)
class ArtifactSummary:
    """What the store holds now, and under which policy."""

    policy: ArtifactPolicy
    kept_jobs: int
    kept_bytes: int
    expired_jobs: int


class ArtifactStore:
    """The exported models of one daemon's jobs; thread-safe (jobs end on their own threads)."""

    def __init__(self, runtime_dir: Path, table: JobTable, policy: ArtifactPolicy) -> None:
        self.runtime_dir, self.table, self.policy = Path(runtime_dir), table, policy
        self._lock = threading.Lock()

    def _dir(self, job_id: str) -> Path:
        return artifact_dir(job_directory(self.runtime_dir, job_id))

    def job_ended(self, job_id: str, outcome: JobState) -> None:
        """Record what job `job_id` left (called before its end is visible), then apply the policy."""
        directory = self._dir(job_id)
        if outcome != JobState.SUCCEEDED:
            if remove_artifact(directory.parent):
                log.info("job %s: removed the model it exported before it %s", job_id, outcome.value)
            why = f"the job {outcome.value}: only a succeeded job keeps its model"
            self.table.set_artifact(job_id, JobArtifactInfo(NONE, why))
            return
        if not directory.exists():
            why = (
                "the job succeeded without exporting a model (a script that never called job.prepare(model, "
                "optimizer) or job.fit())"
            )
            self.table.set_artifact(job_id, JobArtifactInfo(NONE, why))
            return
        try:
            manifest = read_manifest(directory)
        except GraphtierError as exc:
            remove_artifact(directory.parent)
            self.table.set_artifact(job_id, JobArtifactInfo(NONE, f"its exported model was unreadable, removed: {exc}"))
            return
        info = JobArtifactInfo(KEPT, manifest.describe(), artifact_bytes(directory), str(directory))
        self.table.set_artifact(job_id, info)
        self.enforce()

    def enforce(self) -> list[str]:
        """Apply the policy to every kept model: the newest that fit stay, the others are removed. The ids
        of the jobs whose models were removed."""
        removed = []
        with self._lock:
            kept = [(job_id, info) for job_id, info in self.table.artifacts().items() if info.state == KEPT]
            kept.sort(key=lambda item: (self._finished(item[0]), job_id_order(item[0])), reverse=True)
            count = total = 0
            for job_id, info in kept:
                why = None
                if count >= self.policy.keep_jobs:
                    why = (
                        f"only the newest {self.policy.keep_jobs} succeeded jobs' models are kept "
                        f"(graphtierd --artifact-keep {self.policy.keep_jobs}) and {count} newer ones are"
                    )
                elif self.policy.budget_bytes is not None and total + info.bytes > self.policy.budget_bytes:
                    why = (
                        f"its {_size(info.bytes)} beside the {_size(total)} of the {count} newer models kept would "
                        f"exceed graphtierd --artifact-budget ({_size(self.policy.budget_bytes)})"
                    )
                if why is None:
                    count, total = count + 1, total + info.bytes
                    continue
                remove_artifact(self._dir(job_id).parent)
                self.table.set_artifact(
                    job_id, JobArtifactInfo(EXPIRED, f"removed by the daemon's artifact retention: {why}", 0, info.path)
                )
                log.info("job %s: its exported model was removed (%s)", job_id, why)
                removed.append(job_id)
        return removed

    def _finished(self, job_id: str) -> float:
        """When the job ended; one ending now (its end not yet recorded) is the newest."""
        try:
            finished = self.table.get(job_id).finished_at
        except DaemonError:
            return 0.0
        return finished.timestamp() if finished is not None else math.inf

    def export_files(self, job_id: str) -> list[tuple[str, Path]]:
        """(name, path) of each file of job `job_id`'s exported model, manifest last; UnknownJobError for an
        unknown job, DaemonError naming why when it has none to export."""
        record = self.table.get(job_id)
        if record.state != JobState.SUCCEEDED:
            cause = f" ({record.message})" if record.message else ""
            still = "has not ended" if not record.state.final else f"{record.state.value}{cause}"
            raise DaemonError(f"job {job_id} {still}: only a succeeded job has an exported model")
        info = self.table.artifact(job_id)
        if info is None:
            raise DaemonError(
                f"job {job_id} succeeded but has no exported model: it ended under a daemon that kept none"
            )
        if info.state != KEPT:
            raise DaemonError(f"job {job_id} has no exported model any more: {info.message}")
        directory = self._dir(job_id)
        try:
            files = artifact_files(directory)
        except GraphtierError as exc:
            raise DaemonError(f"job {job_id}'s exported model cannot be read: {exc}") from None
        return [(path.name, path) for path in files]

    def summary(self) -> ArtifactSummary:
        artifacts = self.table.artifacts().values()
        kept = [a for a in artifacts if a.state == KEPT]
        return ArtifactSummary(
            policy=self.policy,
            kept_jobs=len(kept),
            kept_bytes=sum(a.bytes for a in kept),
            expired_jobs=sum(1 for a in artifacts if a.state == EXPIRED),
        )
