"""`MetricsRegistry`: every metric of the daemon, in one prometheus_client `CollectorRegistry`.

Counters are fed deltas by the progress tracker (reports carry cumulative values; the
tracker turns them into increments and handles reporter restarts like Prometheus counter
resets). Dataset sizes and job counts are read live from their owners at scrape time, so
they can never go stale. `/metrics` and `/v1/status` both read this registry.

Traffic sources (label `tier`): replicated, interleaved_local, interleaved_peer, host,
storage, network (a partitioned job's rows fetched from other nodes; per peer:
`graphtier_network_peer_{rows,bytes,requests}_total{job_id,rank,peer}`, and the calls' latencies and
the gathers' waits for them, `graphtier_network_{fetch,wait}_seconds_total`; NETWORK_COUNTERS).
How the storage tier's rows were served (`StorageCounters`, per job and rank): read
from the file (`graphtier_storage_read_{rows,bytes}_total`, the bytes whole device requests)
or served by the look-ahead window (`graphtier_window_hit_{rows,bytes}_total`), requests,
and times from which PromQL derives the queue depth and the bandwidth:

    rate(graphtier_storage_request_seconds_total[1m]) / rate(graphtier_storage_io_seconds_total[1m])
    rate(graphtier_storage_read_bytes_total[1m]) / rate(graphtier_storage_io_seconds_total[1m])
    rate(graphtier_storage_read_bytes_total[1m]) / rate(graphtier_storage_read_row_bytes_total[1m])  # amplification
 Links (label `link`): local (the device's own memory: replicated +
interleaved_local), nvlink (interleaved_peer), pcie (host), storage. Beside these accounted
bytes, `NvmlCollector` (service/hardware) exports what the hardware measured:
`graphtier_pcie_measured_{tx,rx}_bytes_total{gpu}` and `graphtier_nvlink_measured_*`.
Hit ratio in PromQL:

    sum(rate(graphtier_tier_bytes_total{tier=~"replicated|interleaved_.*"}[1m]))
      / sum(rate(graphtier_tier_bytes_total[1m]))
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from graphtier.contract.network import NetworkCounters, PeerTraffic
from graphtier.contract.storage import StorageCounters
from graphtier.contract.traffic import SOURCES, SourceTraffic, TrafficCounts

LINK_OF_SOURCE: dict[str, str] = {
    "replicated": "local",
    "interleaved_local": "local",
    "interleaved_peer": "nvlink",
    "host": "pcie",
    "storage": "storage",
    "network": "network",
}
LINKS: tuple[str, ...] = ("local", "nvlink", "pcie", "storage", "network")


@dataclass(frozen=True)
class ProducerDelta:
    """What one producer report added since the previous one."""

    batches: int
    sampled_nodes: int
    sampled_edges: int
    sample_seconds: float
    gather_seconds: float
    wait_seconds: float
    traffic: TrafficCounts
    storage: StorageCounters = StorageCounters()  # counters only: the increments
    network: NetworkCounters = NetworkCounters()  # the increments, per peer


# StorageCounters field -> (metric name, help, unit); the one list /metrics and /v1/status share
STORAGE_COUNTERS: dict[str, tuple[str, str, str]] = {
    "read_rows": ("graphtier_storage_read_rows", "Storage-tier rows read from the file.", ""),
    "read_bytes": (
        "graphtier_storage_read_bytes",
        "Bytes the storage reads asked the device for (whole aligned "
        "requests; the rows' own bytes through the mapping).",
        "bytes",
    ),
    "read_row_bytes": (
        "graphtier_storage_read_row_bytes",
        "Bytes of the storage-tier rows read (rows x row bytes): read bytes over it is the read amplification.",
        "bytes",
    ),
    "requests": ("graphtier_storage_requests", "Storage read requests issued (none through the mapping).", ""),
    "window_rows": (
        "graphtier_window_hit_rows",
        "Storage-tier rows served by the look-ahead window, not read again.",
        "",
    ),
    "window_bytes": ("graphtier_window_hit_bytes", "Bytes of the rows the look-ahead window served.", "bytes"),
    "io_seconds": ("graphtier_storage_io_seconds", "Time storage requests were in flight.", "seconds"),
    "request_seconds": (
        "graphtier_storage_request_seconds",
        "Storage requests' latencies, summed (over the I/O time: the mean queue depth).",
        "seconds",
    ),
    "read_seconds": (
        "graphtier_storage_read_seconds",
        "Time in storage reads: planning, requests, copying rows out.",
        "seconds",
    ),
}

# the network tier: PeerTraffic field -> (metric name, help) per peer, and NetworkCounters times
NETWORK_PEER_COUNTERS: dict[str, tuple[str, str]] = {
    "rows": ("graphtier_network_peer_rows", "Feature rows fetched from another node (partitioned features)."),
    "bytes": ("graphtier_network_peer_bytes", "Feature bytes fetched from another node (partitioned features)."),
    "requests": (
        "graphtier_network_peer_requests",
        "FetchRows calls to another node (one per batch, or more when a reply would pass the message limit).",
    ),
}
NETWORK_TIMES: dict[str, tuple[str, str]] = {
    "fetch_seconds": ("graphtier_network_fetch_seconds", "FetchRows calls' latencies, summed."),
    "wait_seconds": (
        "graphtier_network_wait_seconds",
        "Time gathers waited for fetched rows not yet arrived (0 when the look-ahead hides the network).",
    ),
}


@dataclass(frozen=True)
class TrainerDelta:
    """What one trainer report added since the previous one."""

    steps: int
    train_seconds: float
    data_wait_seconds: float


class _LiveGauges(Collector):
    """Gauges computed at scrape time from the daemon's live state."""

    def __init__(self, families: Callable[[], Iterable[Metric]], describe: Callable[[], Iterable[Metric]]) -> None:
        self._families = families
        self._describe = describe

    def collect(self) -> Iterable[Metric]:
        return self._families()

    def describe(self) -> Iterable[Metric]:
        return self._describe()


JOB_LABEL = "job_id"  # not "job": Prometheus sets that label on every series it scrapes (the target)
ENDED_JOB = "ended"  # the job_id label that retired jobs' counters fold into


class MetricsRegistry:
    """The daemon's metrics; `exposition()` is the /metrics body."""

    def __init__(self, *, simulated_devices: bool) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        job_rank = ("job_id", "rank")
        self.tier_rows = Counter(
            "graphtier_tier_rows",
            "Feature rows served, by traffic source.",
            ("dataset", "job_id", "rank", "tier"),
            registry=r,
        )
        self.tier_bytes = Counter(
            "graphtier_tier_bytes",
            "Feature bytes served, by traffic source.",
            ("dataset", "job_id", "rank", "tier"),
            unit="bytes",
            registry=r,
        )
        self.link_bytes = Counter(
            "graphtier_link_bytes",
            "Feature bytes by the link they would cross (local, nvlink, pcie, storage, network).",
            ("link",),
            unit="bytes",
            registry=r,
        )
        self.batches = Counter("graphtier_batches", "Mini-batches trained.", job_rank, registry=r)
        self.batches_produced = Counter(
            "graphtier_batches_produced", "Mini-batches published by producers.", job_rank, registry=r
        )
        self.sampled_nodes = Counter("graphtier_sampled_nodes", "Nodes in sampled subgraphs.", job_rank, registry=r)
        self.sampled_edges = Counter("graphtier_sampled_edges", "Edges in sampled subgraphs.", job_rank, registry=r)
        self.sample_seconds = Counter(
            "graphtier_sample_seconds", "Time producers spent sampling.", job_rank, unit="seconds", registry=r
        )
        self.gather_seconds = Counter(
            "graphtier_gather_seconds", "Time producers spent gathering features.", job_rank, unit="seconds", registry=r
        )
        self.producer_wait_seconds = Counter(
            "graphtier_producer_wait_seconds",
            "Time producers waited for a free slot.",
            job_rank,
            unit="seconds",
            registry=r,
        )
        self.train_seconds = Counter(
            "graphtier_train_seconds",
            "Time ranks spent in forward, backward and step.",
            job_rank,
            unit="seconds",
            registry=r,
        )
        self.data_wait_seconds = Counter(
            "graphtier_data_wait_seconds",
            "Time ranks waited for their next batch.",
            job_rank,
            unit="seconds",
            registry=r,
        )
        self.reports = Counter("graphtier_progress_reports", "Progress reports received.", ("reporter",), registry=r)
        self.reporter_restarts = Counter(
            "graphtier_reporter_restarts",
            "Reports whose counters went back (the reporter restarted).",
            ("job_id", "rank", "reporter"),
            registry=r,
        )
        self.producer_lag = Gauge(
            "graphtier_producer_lag_batches",
            "Batch the producer fills minus the batch the rank holds.",
            job_rank,
            registry=r,
        )
        self.ready_slots = Gauge(
            "graphtier_producer_ready_slots", "Slots holding batches the rank has not taken.", job_rank, registry=r
        )
        self.loss = Gauge("graphtier_train_loss", "Training loss of the latest step.", job_rank, registry=r)
        self.accuracy = Gauge("graphtier_train_accuracy", "Training accuracy of the latest step.", job_rank, registry=r)
        self.simulated = Gauge(
            "graphtier_device_tiers_simulated", "1 when device tiers are accounted, not real (no GPU).", registry=r
        )
        self.simulated.set(1 if simulated_devices else 0)
        # retired jobs' counters as they ended, summed over ranks (their ranks are no longer shown):
        # label items -> value; /v1/status still reports each job's totals
        self._retired: dict[Counter, dict[tuple[tuple[str, str], ...], float]] = {}
        self._simulated_devices = simulated_devices  # fixed for the daemon's life: read without a registry walk
        self.start_time = Gauge(
            "graphtier_daemon_start_time_seconds", "Unix time the daemon started.", unit="seconds", registry=r
        )
        self.start_time.set(time.time())
        self.link_bytes_children = {link: self.link_bytes.labels(link=link) for link in LINKS}
        self.storage = {
            field: Counter(name, text, job_rank, unit=unit, registry=r)
            for field, (name, text, unit) in STORAGE_COUNTERS.items()
        }
        self.network_peer = {
            field: Counter(name, text, ("job_id", "rank", "peer"), unit="bytes" if field == "bytes" else "", registry=r)
            for field, (name, text) in NETWORK_PEER_COUNTERS.items()
        }
        self.network_times = {
            field: Counter(name, text, job_rank, unit="seconds", registry=r)
            for field, (name, text) in NETWORK_TIMES.items()
        }
        self.lookahead_batches = Gauge(
            "graphtier_lookahead_batches",
            "Batches the producer has sampled ahead of the one it gathers (the look-ahead window).",
            job_rank,
            registry=r,
        )
        self.window_cached_rows = Gauge(
            "graphtier_window_cached_rows",
            "Storage rows the look-ahead window holds for the batches in it.",
            job_rank,
            registry=r,
        )

    def watch(
        self,
        dataset_tiers: Callable[[], Iterable[tuple[str, str, int]]],
        job_states: Callable[[], Iterable[tuple[str, int]]],
    ) -> None:
        """Export live gauges: `dataset_tiers()` yields (dataset, tier, bytes), `job_states()` (state, count)."""

        def describe() -> list[GaugeMetricFamily]:
            return [
                GaugeMetricFamily(
                    "graphtier_dataset_bytes",
                    "Bytes of one copy of each tier of each loaded dataset.",
                    labels=("dataset", "tier"),
                    unit="bytes",
                ),
                GaugeMetricFamily("graphtier_jobs", "Jobs by state.", labels=("state",)),
            ]

        def families() -> list[GaugeMetricFamily]:
            datasets, jobs = describe()
            for dataset, tier, nbytes in dataset_tiers():
                datasets.add_metric((dataset, tier), nbytes)
            for state, count in job_states():
                jobs.add_metric((state,), count)
            return [datasets, jobs]

        self.registry.register(_LiveGauges(families, describe))

    def add_collector(self, collector: Collector) -> None:
        """Export another owner's metrics on this registry (the NVML collector's measured bytes)."""
        self.registry.register(collector)

    def add_producer(self, dataset: str, job: str, rank: int, delta: ProducerDelta) -> None:
        labels = {"job_id": job, "rank": str(rank)}
        self.batches_produced.labels(**labels).inc(delta.batches)
        self.sampled_nodes.labels(**labels).inc(delta.sampled_nodes)
        self.sampled_edges.labels(**labels).inc(delta.sampled_edges)
        self.sample_seconds.labels(**labels).inc(delta.sample_seconds)
        self.gather_seconds.labels(**labels).inc(delta.gather_seconds)
        self.producer_wait_seconds.labels(**labels).inc(delta.wait_seconds)
        for source, traffic in delta.traffic.by_source().items():
            self.tier_rows.labels(dataset=dataset, tier=source, **labels).inc(traffic.rows)
            self.tier_bytes.labels(dataset=dataset, tier=source, **labels).inc(traffic.bytes)
            self.link_bytes_children[LINK_OF_SOURCE[source]].inc(traffic.bytes)
        for field, counter in self.storage.items():
            counter.labels(**labels).inc(getattr(delta.storage, field))
        for peer in delta.network.peers:
            for field, counter in self.network_peer.items():
                counter.labels(peer=peer.peer, **labels).inc(getattr(peer, field))
        for field, counter in self.network_times.items():
            counter.labels(**labels).inc(getattr(delta.network, field))

    def set_producer_gauges(
        self, job: str, rank: int, *, lag_batches: int, ready_slots: int, storage: StorageCounters | None = None
    ) -> None:
        self.producer_lag.labels(job_id=job, rank=str(rank)).set(lag_batches)
        self.ready_slots.labels(job_id=job, rank=str(rank)).set(ready_slots)
        if storage is not None:
            self.lookahead_batches.labels(job_id=job, rank=str(rank)).set(storage.lookahead_batches)
            self.window_cached_rows.labels(job_id=job, rank=str(rank)).set(storage.window_cached_rows)

    def add_trainer(self, job: str, rank: int, delta: TrainerDelta, *, loss: float, accuracy: float) -> None:
        labels = {"job_id": job, "rank": str(rank)}
        self.batches.labels(**labels).inc(delta.steps)
        self.train_seconds.labels(**labels).inc(delta.train_seconds)
        self.data_wait_seconds.labels(**labels).inc(delta.data_wait_seconds)
        self.loss.labels(**labels).set(loss)
        self.accuracy.labels(**labels).set(accuracy)

    def count_report(self, reporter: str, *, job: str, rank: int, restarted: bool) -> None:
        self.reports.labels(reporter=reporter).inc()
        if restarted:
            self.reporter_restarts.labels(job_id=job, rank=str(rank), reporter=reporter).inc()

    def retire_job(self, job: str) -> int:
        """Drop job `job`'s series from /metrics (it ended a while ago): counters fold into the series
        labelled job_id="ended" (so daemon-wide sums never go back), gauges go. The counters' values are
        kept beside the registry, summed over ranks, so the status still reports the job's totals. The
        number of series dropped."""
        dropped = 0
        for metric in self._job_metrics():
            names = metric._labelnames  # prometheus_client keeps no public accessor
            for family in metric.collect():
                for sample in family.samples:
                    if sample.labels.get(JOB_LABEL) != job or sample.name.endswith("_created"):
                        continue
                    values = [sample.labels[n] for n in names]
                    if isinstance(metric, Counter) and sample.name.endswith("_total") and sample.value:
                        ended = [
                            ENDED_JOB if n == JOB_LABEL else ("" if n == "rank" else sample.labels[n]) for n in names
                        ]
                        metric.labels(*ended).inc(sample.value)
                        kept = self._retired.setdefault(metric, {})
                        key = tuple((n, "" if n == "rank" else sample.labels[n]) for n in names)
                        kept[key] = kept.get(key, 0.0) + sample.value
                    with contextlib.suppress(KeyError):
                        metric.remove(*values)
                        dropped += 1
        return dropped

    def _job_metrics(self) -> list[Counter | Gauge]:
        metrics = [
            *vars(self).values(),
            *self.storage.values(),
            *self.network_peer.values(),
            *self.network_times.values(),
        ]
        return [m for m in metrics if isinstance(m, (Counter, Gauge)) and JOB_LABEL in getattr(m, "_labelnames", ())]

    def exposition(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    # Reading back, for /v1/status: the same numbers /metrics shows.

    def _samples(self, counter: Counter, **match: str) -> Iterable[tuple[dict[str, str], float]]:
        """The live series of `counter` matching `match` and retired jobs' series as they ended, in
        place of the job_id="ended" fold: the same sums, and each job's own totals."""
        for family in counter.collect():
            for sample in family.samples:
                if sample.labels.get(JOB_LABEL) == ENDED_JOB or not sample.name.endswith("_total"):
                    continue
                if all(sample.labels.get(k) == v for k, v in match.items()):
                    yield sample.labels, sample.value
        for key, value in self._retired.get(counter, {}).items():
            labels = dict(key)
            if all(labels.get(k) == v for k, v in match.items()):
                yield labels, value

    def traffic(self, **match: str) -> TrafficCounts:
        """Traffic summed over every series whose labels include `match` (e.g. job_id="7")."""
        rows = dict.fromkeys(SOURCES, 0)
        nbytes = dict.fromkeys(SOURCES, 0)
        for labels, value in self._samples(self.tier_rows, **match):
            rows[labels["tier"]] += int(value)
        for labels, value in self._samples(self.tier_bytes, **match):
            nbytes[labels["tier"]] += int(value)
        per = {source: SourceTraffic(rows[source], nbytes[source]) for source in SOURCES}
        return TrafficCounts(**per, simulated=self.simulated_devices)

    def network(self, **match: str) -> NetworkCounters:
        """The network tier per peer, summed over every series whose labels include `match`."""
        per: dict[str, dict[str, int]] = {}
        for field, counter in self.network_peer.items():
            for labels, value in self._samples(counter, **match):
                per.setdefault(labels["peer"], dict.fromkeys(NETWORK_PEER_COUNTERS, 0))[field] += int(value)
        times = {field: sum(v for _, v in self._samples(c, **match)) for field, c in self.network_times.items()}
        return NetworkCounters(tuple(PeerTraffic(peer, **per[peer]) for peer in sorted(per)), **times)

    @property
    def simulated_devices(self) -> bool:
        return self._simulated_devices

    def link_totals(self) -> dict[str, int]:
        """Bytes per link since the daemon started."""
        return {
            link: int(self.registry.get_sample_value("graphtier_link_bytes_total", {"link": link}) or 0)
            for link in LINKS
        }

    def totals_by(self, counter: Counter, *labels: str) -> dict[tuple[str, ...], float]:
        """`counter` summed per value of `labels` (e.g. ("job_id", "rank")), read in one pass: a status
        snapshot asks for many such sums, and each `total()` would walk every series again."""
        sums: dict[tuple[str, ...], float] = {}
        for sample_labels, value in self._samples(counter):
            key = tuple(sample_labels.get(name, "") for name in labels)
            sums[key] = sums.get(key, 0.0) + value
        return sums

    def total(self, counter: Counter, **match: str) -> float:
        """Sum of `counter` over every series whose labels include `match`."""
        return sum(value for _, value in self._samples(counter, **match))

    def sample(self, name: str, **labels: str) -> float | None:
        """The value of one exposed sample (e.g. "graphtier_producer_lag_batches", job_id=..., rank=...)."""
        return self.registry.get_sample_value(name, labels)
