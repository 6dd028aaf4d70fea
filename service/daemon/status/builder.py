"""`StatusBuilder`: the `/v1/status` snapshot, read from the metrics registry and live state."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from graphtier.contract.machine import MachineReport, MeasuredTraffic
from graphtier.contract.network import NetworkCounters
from graphtier.contract.status import (
    ArtifactsStatus,
    DaemonStatus,
    DatasetStatus,
    EndpointsStatus,
    JobStatus,
    NetworkStatus,
    PeerStatus,
    RankStatus,
    SourceStatus,
    StorageStatus,
    TierStatus,
    TrafficStatus,
)
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.service.daemon.datasets.registry import DatasetRegistry, LoadedDataset
from graphtier.service.daemon.jobs.artifacts import ArtifactStore
from graphtier.service.daemon.jobs.job_view import stored_job
from graphtier.service.daemon.jobs.progress import ProgressTracker, RankView
from graphtier.service.daemon.jobs.table import JobRecord, JobTable
from graphtier.service.daemon.metrics.registry import LINK_OF_SOURCE, LINKS, STORAGE_COUNTERS, MetricsRegistry


def package_version() -> str:
    try:
        return metadata.version("graphtier")
    except metadata.PackageNotFoundError:
        return "unknown"


class StatusBuilder:
    """Builds `DaemonStatus` snapshots; cheap enough to call on every dashboard poll."""

    def __init__(
        self,
        *,
        endpoints: EndpointsStatus,
        dataset_root: str,
        datasets: DatasetRegistry,
        jobs: JobTable,
        tracker: ProgressTracker,
        metrics: MetricsRegistry,
        started_at: datetime,
        machine: Callable[[], MachineReport],
        measured: Callable[[], MeasuredTraffic],
        artifacts: ArtifactStore | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.dataset_root = dataset_root
        self.datasets = datasets
        self.jobs = jobs
        self.tracker = tracker
        self.metrics = metrics
        self.started_at = started_at
        self.machine = machine
        self.measured = measured
        self.artifacts = artifacts
        self.version = package_version()

    def traffic(self, counts: TrafficCounts | None = None, **match: str) -> TrafficStatus:
        """Traffic of the series matching `match` (e.g. job_id="7"), or of `counts` when given."""
        counts = counts if counts is not None else self.metrics.traffic(**match)
        total = counts.total_bytes
        sources = {
            name: SourceStatus(rows=t.rows, bytes=t.bytes, share=t.bytes / total if total else 0.0)
            for name, t in counts.by_source().items()
        }
        if match:  # the link counter has no job label: sum this job's sources by link
            links = dict.fromkeys(LINKS, 0)
            for name, source in counts.by_source().items():
                links[LINK_OF_SOURCE[name]] += source.bytes
        else:
            links = self.metrics.link_totals()
        return TrafficStatus(
            sources=sources,
            links=links,
            total_rows=counts.total_rows,
            total_bytes=total,
            device_bytes=counts.device_bytes,
            hit_ratio=counts.hit_ratio,
            simulated=counts.simulated,
        )

    @staticmethod
    def storage(counters: StorageCounters, latest: list[StorageCounters]) -> StorageStatus:
        """`counters` (from the registry) as the status shows them; mode, window and the gauges from the
        producers' `latest` figures."""
        modes = {s.mode for s in latest}
        return StorageStatus(
            mode=modes.pop() if len(modes) == 1 else ("mixed" if modes else ""),
            window=max((s.window for s in latest), default=0),
            read_rows=counters.read_rows,
            read_bytes=counters.read_bytes,
            read_row_bytes=counters.read_row_bytes,
            read_amplification=counters.read_amplification,
            requests=counters.requests,
            window_rows=counters.window_rows,
            window_bytes=counters.window_bytes,
            window_hit_ratio=counters.window_hit_ratio,
            io_seconds=counters.io_seconds,
            read_seconds=counters.read_seconds,
            queue_depth=counters.queue_depth,
            bandwidth=counters.bandwidth,
            lookahead_batches=sum(s.lookahead_batches for s in latest),
            window_cached_rows=sum(s.window_cached_rows for s in latest),
        )

    @staticmethod
    def network(counters: NetworkCounters) -> NetworkStatus:
        """The network tier (from the registry) as the status shows it."""
        return NetworkStatus(
            rows=counters.rows,
            bytes=counters.bytes,
            requests=counters.requests,
            fetch_seconds=counters.fetch_seconds,
            wait_seconds=counters.wait_seconds,
            peers=[PeerStatus(peer=p.peer, rows=p.rows, bytes=p.bytes, requests=p.requests) for p in counters.peers],
        )

    def _storage_counters(self, sums: dict[str, dict[tuple[str, ...], float]], job_id: str | None) -> StorageCounters:
        """The storage counters of one job, or of every series (job_id None), as /metrics has them."""
        values = {
            field: sum(v for (job,), v in sums[f"storage_{field}"].items() if job_id is None or job == job_id)
            for field in STORAGE_COUNTERS
        }
        fields: dict[str, Any] = {k: v if k.endswith("seconds") else int(v) for k, v in values.items()}  # by name
        return StorageCounters(**fields)

    def _dataset(self, loaded: LoadedDataset) -> DatasetStatus:
        layout = loaded.layout()
        return DatasetStatus(
            name=loaded.name,
            num_nodes=loaded.manifest.num_nodes,
            num_edges=layout.num_edges,
            feature_dim=layout.feature_dim,
            num_classes=layout.num_classes,
            feature_bytes=layout.feature_bytes,
            structure_bytes=layout.structure_bytes,
            resident_bytes=loaded.resident_bytes,
            num_devices=loaded.plan.num_devices,
            device_bytes_per_device=layout.device_bytes_per_device,
            simulated_devices=layout.simulated_devices,
            tiers=[TierStatus(tier=t.tier, rows=t.rows, bytes=t.bytes) for t in layout.tier_sizes],
            job_ids=self.jobs.jobs_using(loaded.name),
            loaded_at=loaded.loaded_at,
        )

    def _rank(self, job_id: str, view: RankView, sums: dict[str, dict[tuple[str, ...], float]]) -> RankStatus:
        key = (job_id, str(view.rank))
        trainer, producer = view.trainer, view.producer
        return RankStatus(
            rank=view.rank,
            trainer_pid=view.trainer_pid,
            producer_pid=view.producer_pid,
            phase=trainer.phase.value if trainer else "unspecified",
            epoch=trainer.epoch if trainer else (producer.epoch if producer else 0),
            global_step=trainer.global_step if trainer else 0,
            loss=trainer.loss if trainer else None,
            accuracy=trainer.accuracy if trainer else None,
            batches_trained=int(sums["batches"].get(key, 0)),
            batches_produced=int(sums["batches_produced"].get(key, 0)),
            producer_lag_batches=producer.lag_batches if producer else 0,
            ready_slots=producer.ready_slots if producer else 0,
            sample_seconds=sums["sample_seconds"].get(key, 0.0),
            gather_seconds=sums["gather_seconds"].get(key, 0.0),
            train_seconds=sums["train_seconds"].get(key, 0.0),
            data_wait_seconds=sums["data_wait_seconds"].get(key, 0.0),
            last_report=view.last_report,
        )

    def _per_rank_sums(self) -> dict[str, dict[tuple[str, ...], float]]:
        """Every per-rank counter the status shows, summed per (job, rank) in one pass each."""
        m = self.metrics
        counters = {
            "batches": m.batches,
            "batches_produced": m.batches_produced,
            "sample_seconds": m.sample_seconds,
            "gather_seconds": m.gather_seconds,
            "train_seconds": m.train_seconds,
            "data_wait_seconds": m.data_wait_seconds,
        }
        sums = {name: m.totals_by(counter, "job_id", "rank") for name, counter in counters.items()}
        sums["tier_rows"] = m.totals_by(m.tier_rows, "job_id", "tier")
        sums["tier_bytes"] = m.totals_by(m.tier_bytes, "job_id", "tier")
        for field, counter in m.storage.items():
            sums[f"storage_{field}"] = m.totals_by(counter, "job_id")
        return sums

    def _job_traffic(self, job_id: str, sums: dict[str, dict[tuple[str, ...], float]]) -> TrafficCounts:
        per = {
            source: SourceTraffic(
                int(sums["tier_rows"].get((job_id, source), 0)), int(sums["tier_bytes"].get((job_id, source), 0))
            )
            for source in SOURCES
        }
        return TrafficCounts(**per, simulated=self.metrics.simulated_devices)

    def _job(self, record: JobRecord, sums: dict[str, dict[tuple[str, ...], float]]) -> JobStatus:
        views = self.tracker.ranks(record.job_id)
        ranks = [self._rank(record.job_id, view, sums) for view in views]
        trained, produced = self.tracker.rates(record.job_id, ended=record.state.final)
        evaluated = [v.trainer for v in views if v.trainer is not None and v.trainer.val_accuracy is not None]
        linked = [v.trainer for v in views if v.trainer is not None and v.trainer.eval_metrics]
        artifact = self.jobs.artifact(record.job_id)
        status = JobStatus(
            job_id=record.job_id,
            name=record.name,
            owner=str(record.owner) if record.owner is not None else "",
            dataset=record.dataset,
            state=record.state.value,
            message=record.message,
            world_size=record.world_size,
            created_at=record.created_at,
            finished_at=record.finished_at,
            cancel_requested=record.cancel_requested,
            batches_total=int(sum(v for (job, _), v in sums["batches"].items() if job == record.job_id)),
            batches_per_second=trained,
            produced_batches_per_second=produced,
            producer_lag_batches=max((r.producer_lag_batches for r in ranks), default=0),
            gpu_share=record.gpu_share,
            val_accuracy=evaluated[0].val_accuracy if evaluated else None,
            test_accuracy=evaluated[0].test_accuracy if evaluated else None,
            link_metrics=dict(linked[0].eval_metrics) if linked else {},
            best=next((v.trainer.best for v in views if v.trainer is not None and v.trainer.best is not None), None),
            traffic=self.traffic(self._job_traffic(record.job_id, sums), job_id=record.job_id),
            storage=self.storage(
                self._storage_counters(sums, record.job_id),
                [v.producer.storage for v in views if v.producer is not None],
            ),
            network=self.network(self.metrics.network(job_id=record.job_id)),
            ranks=ranks,
            epochs_recorded=len(self.jobs.history(record.job_id)),
            artifact=artifact.state if artifact is not None else "",
            artifact_bytes=artifact.bytes if artifact is not None else 0,
        )
        return status if self.jobs.stored(record.job_id) is None else self._with_recorded_figures(status)

    def _with_recorded_figures(self, status: JobStatus) -> JobStatus:
        """An ended job answered from its saved Job message (an earlier daemon's, or one retired after
        job_retire_s), with the figures that message recorded where this daemon holds none: its counters
        start at zero and its tracker forgets a retired job's trainers, so batches, traffic and accuracy
        would read 0 or null for a job that trained."""
        info = stored_job(self.jobs, status.job_id)
        update: dict[str, Any] = {}
        recorded_batches = sum(rank.global_step for rank in info.ranks)
        if info.progress is not None:
            recorded_batches = recorded_batches or info.progress.global_step
            if status.traffic.total_rows == 0 and info.progress.traffic.total_rows:
                update["traffic"] = self.traffic(info.progress.traffic, job_id=status.job_id)
            if status.storage.read_rows == 0 and status.storage.window_rows == 0:
                update["storage"] = self.storage(info.progress.storage, [])
            if status.batches_per_second == 0:
                update["batches_per_second"] = info.progress.batches_per_second
        if recorded_batches > status.batches_total:
            update["batches_total"] = recorded_batches
        result = info.result
        if result is not None:
            if status.val_accuracy is None and not result.metrics:
                update["val_accuracy"], update["test_accuracy"] = result.val_accuracy, result.test_accuracy
            if not status.link_metrics and result.metrics:
                update["link_metrics"] = dict(result.metrics)
            if status.best is None and result.best is not None:
                update["best"] = result.best
        return status.model_copy(update=update)

    def snapshot(self) -> DaemonStatus:
        now = datetime.now(timezone.utc)
        sums = self._per_rank_sums()
        jobs = [self._job(record, sums) for record in self.jobs.list()]
        trained, produced = self.tracker.rates()
        m = self.metrics
        running = [j for j in jobs if j.state in ("starting", "running")]
        return DaemonStatus(
            version=self.version,
            pid=os.getpid(),
            started_at=self.started_at,
            time=now,
            uptime_seconds=(now - self.started_at).total_seconds(),
            endpoints=self.endpoints,
            dataset_root=self.dataset_root,
            simulated_devices=m.simulated_devices,
            datasets=[self._dataset(loaded) for loaded in self.datasets.loaded()],
            jobs=jobs,
            traffic=self.traffic(),
            storage=self.storage(
                self._storage_counters(sums, None),
                [
                    v.producer.storage
                    for j in jobs
                    for v in self.tracker.ranks(j.job_id)
                    if v.producer is not None and j.state in ("starting", "running")
                ],
            ),
            network=self.network(m.network()),
            batches_total=int(m.total(m.batches)),
            batches_per_second=trained,
            produced_batches_per_second=produced,
            producer_lag_batches=max((j.producer_lag_batches for j in running), default=0),
            sample_seconds_total=m.total(m.sample_seconds),
            gather_seconds_total=m.total(m.gather_seconds),
            train_seconds_total=m.total(m.train_seconds),
            machine=self.machine(),
            measured=self.measured(),
            artifacts=self._artifacts(),
        )

    def _artifacts(self) -> ArtifactsStatus:
        if self.artifacts is None:
            return ArtifactsStatus()
        summary = self.artifacts.summary()
        return ArtifactsStatus(
            keep_jobs=summary.policy.keep_jobs,
            budget_bytes=summary.policy.budget_bytes,
            policy=summary.policy.describe(),
            kept_jobs=summary.kept_jobs,
            kept_bytes=summary.kept_bytes,
            expired_jobs=summary.expired_jobs,
        )
