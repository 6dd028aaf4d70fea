"""Progress reports from a job's processes, and the tracker that turns them into metrics.

Reports carry cumulative counters, so a lost report loses nothing; a trainer's report also carries
its latest epoch's record, which the job table keeps as the job's history. The tracker keeps each
reporter's previous report and feeds the metrics the difference; when a counter goes back
or the pid changes, the reporter restarted and its whole report counts as new (as
Prometheus treats a counter reset). It also keeps the latest figures of every rank, and
short windows of batch counts for batches/s.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from graphtier.contract.jobs.progress import ProducerFigures, ProgressReport, TrainerFigures
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts
from graphtier.service.daemon.jobs.table import JobTable
from graphtier.service.daemon.metrics.registry import STORAGE_COUNTERS, MetricsRegistry, ProducerDelta, TrainerDelta


@dataclass(frozen=True)
class RankView:
    """The latest of one rank, as the status shows it."""

    rank: int
    trainer_pid: int = 0
    producer_pid: int = 0
    trainer: TrainerFigures | None = None
    producer: ProducerFigures | None = None
    last_report: datetime | None = None


_TRAINER_COUNTERS = ("steps_total", "train_seconds_total", "data_wait_seconds_total")
_PRODUCER_COUNTERS = (
    "batches_total",
    "sampled_nodes_total",
    "sampled_edges_total",
    "sample_seconds_total",
    "gather_seconds_total",
    "wait_seconds_total",
    "slot_grows_total",
)


def _traffic_values(traffic: TrafficCounts) -> list[int]:
    return [value for source in SOURCES for value in (getattr(traffic, source).rows, getattr(traffic, source).bytes)]


def _went_back(current: object, previous: object, names: tuple[str, ...]) -> bool:
    went_back = any(getattr(current, name) < getattr(previous, name) for name in names)
    if isinstance(current, ProducerFigures) and isinstance(previous, ProducerFigures):
        went_back |= any(
            c < p for c, p in zip(_traffic_values(current.traffic), _traffic_values(previous.traffic), strict=True)
        )
        went_back |= any(getattr(current.storage, name) < getattr(previous.storage, name) for name in STORAGE_COUNTERS)
        went_back |= current.network.went_back(previous.network)
    return went_back


def _storage_delta(current: StorageCounters, previous: StorageCounters | None) -> StorageCounters:
    """The storage counters' increments (mode, window and the gauges are the current ones)."""
    if previous is None:
        return current
    return replace(current, **{name: getattr(current, name) - getattr(previous, name) for name in STORAGE_COUNTERS})


def _traffic_delta(current: TrafficCounts, previous: TrafficCounts | None) -> TrafficCounts:
    if previous is None:
        return current
    per = {
        source: SourceTraffic(
            getattr(current, source).rows - getattr(previous, source).rows,
            getattr(current, source).bytes - getattr(previous, source).bytes,
        )
        for source in SOURCES
    }
    return TrafficCounts(**per, simulated=current.simulated)


class _RateWindow:
    """Counts added over the last `window_s` seconds -> a rate that decays to 0 when reports stop;
    and the same estimate over everything added (`mean`), for a job that has ended."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, float]] = deque()
        self._first: float | None = None
        self._last, self._after_first = 0.0, 0.0

    def add(self, now: float, count: float) -> None:
        self._samples.append((now, count))
        if self._first is None:
            self._first = now
        else:
            self._after_first += count
        self._last = now

    def mean(self) -> float:
        span = self._last - self._first if self._first is not None else 0.0
        return self._after_first / span if span > 0 else 0.0

    def rate(self, now: float) -> float:
        while self._samples and now - self._samples[0][0] > self.window_s:
            self._samples.popleft()
        if len(self._samples) < 2:
            return 0.0
        span = now - self._samples[0][0]
        return sum(count for _, count in list(self._samples)[1:]) / span if span > 0 else 0.0


@dataclass
class _JobRates:
    trained: _RateWindow
    produced: _RateWindow


class ProgressTracker:
    """Checks reports against the job table, feeds the metrics, and keeps every rank's latest."""

    def __init__(
        self,
        metrics: MetricsRegistry,
        jobs: JobTable,
        *,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self.jobs = jobs
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int, str], tuple[int, TrainerFigures | ProducerFigures]] = {}
        self._ranks: dict[tuple[str, int], RankView] = {}
        self._rates: dict[str, _JobRates] = {}

    def record(self, report: ProgressReport) -> bool:
        """Account one report; returns True when the job is being cancelled (UnknownJobError for a
        job or rank the daemon does not know)."""
        job = self.jobs.check_rank(report.job_id, report.rank)
        kind = report.reporter
        figures = report.figures
        names = _TRAINER_COUNTERS if kind == "trainer" else _PRODUCER_COUNTERS
        with self._lock:
            key = (report.job_id, report.rank, kind)
            previous = self._last.get(key)
            restarted = previous is not None and (previous[0] != report.pid or _went_back(figures, previous[1], names))
            base = None if previous is None or restarted else previous[1]
            self._last[key] = (report.pid, figures)
            delta = {name: getattr(figures, name) - (getattr(base, name) if base else 0) for name in names}
            now = self._clock()
            rates = self._rates.setdefault(
                report.job_id, _JobRates(_RateWindow(self._window_s), _RateWindow(self._window_s))
            )
            view = self._ranks.get((report.job_id, report.rank), RankView(rank=report.rank))
            if isinstance(figures, TrainerFigures):
                view = replace(view, trainer_pid=report.pid, trainer=figures, last_report=report.time)
                rates.trained.add(now, delta["steps_total"])
                self.metrics.add_trainer(
                    report.job_id,
                    report.rank,
                    TrainerDelta(delta["steps_total"], delta["train_seconds_total"], delta["data_wait_seconds_total"]),
                    loss=figures.loss,
                    accuracy=figures.accuracy,
                )
            else:
                view = replace(view, producer_pid=report.pid, producer=figures, last_report=report.time)
                rates.produced.add(now, delta["batches_total"])
                before = base if isinstance(base, ProducerFigures) else None
                traffic = _traffic_delta(figures.traffic, before.traffic if before else None)
                storage = _storage_delta(figures.storage, before.storage if before else None)
                self.metrics.add_producer(
                    job.dataset,
                    report.job_id,
                    report.rank,
                    ProducerDelta(
                        batches=delta["batches_total"],
                        sampled_nodes=delta["sampled_nodes_total"],
                        sampled_edges=delta["sampled_edges_total"],
                        sample_seconds=delta["sample_seconds_total"],
                        gather_seconds=delta["gather_seconds_total"],
                        wait_seconds=delta["wait_seconds_total"],
                        traffic=traffic,
                        storage=storage,
                        network=figures.network.minus(before.network if before else None),
                    ),
                )
                self.metrics.set_producer_gauges(
                    report.job_id,
                    report.rank,
                    lag_batches=figures.lag_batches,
                    ready_slots=figures.ready_slots,
                    storage=figures.storage,
                )
            self._ranks[(report.job_id, report.rank)] = view
            self.metrics.count_report(kind, job=report.job_id, rank=report.rank, restarted=restarted)
        if isinstance(figures, TrainerFigures) and figures.last_epoch is not None:
            self.jobs.record_epoch(report.job_id, figures.last_epoch)  # the job's curves, kept in its table
        return self.jobs.get(report.job_id).cancel_requested

    def new_placement(self, job_id: str) -> None:
        """Job `job_id` restarts with new ranks (another world size): its ranks' latest reports are
        dropped, so the job's position is the new ranks' (its rates and metric series go on)."""
        with self._lock:
            for key in [k for k in self._ranks if k[0] == job_id]:
                del self._ranks[key]

    def forget(self, job_id: str) -> None:
        """Drop what is kept of a retired job: its ranks' latest reports, its rates, and its per-job
        metric series (folded into the daemon's totals)."""
        with self._lock:
            for key in [k for k in self._last if k[0] == job_id]:
                del self._last[key]
            for rank in [k for k in self._ranks if k[0] == job_id]:
                del self._ranks[rank]
            self._rates.pop(job_id, None)
        self.metrics.retire_job(job_id)

    def ranks(self, job_id: str) -> list[RankView]:
        """The latest of every rank of `job_id` that has reported, by rank."""
        with self._lock:
            return sorted((v for (job, _), v in self._ranks.items() if job == job_id), key=lambda v: v.rank)

    def rates(self, job_id: str | None = None, *, ended: bool = False) -> tuple[float, float]:
        """(batches trained, batches produced) per second by all ranks together, for one job or all:
        over the last window, or -- `ended`, for one job -- over its whole run. This is the one
        throughput figure: the CLI, the status page and the metrics all show it."""
        now = self._clock()
        with self._lock:
            windows = [self._rates[job_id]] if job_id in self._rates else [] if job_id else list(self._rates.values())
            if ended and job_id:
                return sum(w.trained.mean() for w in windows), sum(w.produced.mean() for w in windows)
            return sum(w.trained.rate(now) for w in windows), sum(w.produced.rate(now) for w in windows)
