"""Progress reports -> one metrics registry -> /metrics and /v1/status, over real gRPC and HTTP."""

from __future__ import annotations

from datetime import datetime, timezone

import grpc
import httpx
import pytest

from graphtier.contract.environment import JOB_TOKEN_ENV
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs import conversions as job_conversions
from graphtier.contract.jobs.progress import Phase, ProducerFigures, ProgressReport, TrainerFigures
from graphtier.contract.jobs.state import JobState
from graphtier.contract.network import NetworkCounters, PeerTraffic
from graphtier.contract.traffic import SourceTraffic, TrafficCounts
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.daemon.jobs.progress import ProgressTracker
from graphtier.service.daemon.jobs.table import JobRecord, JobTable
from graphtier.service.daemon.metrics.registry import MetricsRegistry
from graphtier.v1 import progress_pb2, progress_pb2_grpc


def _traffic(replicated: int, peer: int, host: int, storage: int, row_bytes: int = 64) -> TrafficCounts:
    def rows(n: int) -> SourceTraffic:
        return SourceTraffic(n, n * row_bytes)

    return TrafficCounts(
        replicated=rows(replicated), interleaved_peer=rows(peer), host=rows(host), storage=rows(storage), simulated=True
    )


def _producer(job: str, rank: int, pid: int, batches: int, traffic: TrafficCounts, lag: int = 1) -> ProgressReport:
    figures = ProducerFigures(
        batches_total=batches,
        sample_seconds_total=0.5 * batches,
        gather_seconds_total=0.25 * batches,
        traffic=traffic,
        lag_batches=lag,
        ready_slots=1,
    )
    return ProgressReport(job_id=job, rank=rank, pid=pid, time=datetime.now(timezone.utc), figures=figures)


def _trainer(job: str, rank: int, pid: int, steps: int) -> ProgressReport:
    figures = TrainerFigures(
        phase=Phase.TRAIN,
        steps_total=steps,
        global_step=steps,
        loss=1.5,
        accuracy=0.25,
        train_seconds_total=0.2 * steps,
        val_accuracy=0.5,
    )
    return ProgressReport(job_id=job, rank=rank, pid=pid, time=datetime.now(timezone.utc), figures=figures)


GPU_SHARE = "producers capped by grid to ~10% of the SMs: mps off was asked for"


@pytest.fixture
def running_job(inproc_daemon, monkeypatch):
    """Job 7, running; this test process speaks as one of its processes (it holds the job's token)."""
    record = inproc_daemon.jobs.add(
        JobRecord(job_id="7", dataset="rmat12", world_size=2, state=JobState.RUNNING, gpu_share=GPU_SHARE)
    )
    monkeypatch.setenv(JOB_TOKEN_ENV, record.token)
    with DataPlaneClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        client.load_dataset("rmat12")
        yield client
        client.unload_dataset("rmat12", force=True)


def _metric(text: str, line_start: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(line_start + " ")]
    return float(line.rsplit(" ", 1)[1])


def test_reports_show_up_in_metrics_and_status_with_restarts_as_resets(running_job, inproc_daemon):
    client = running_job
    assert client.report_progress(_producer("7", 0, pid=100, batches=2, traffic=_traffic(6, 2, 2, 0))) is False
    client.report_progress(_producer("7", 0, pid=100, batches=5, traffic=_traffic(10, 4, 4, 2), lag=3))
    client.report_progress(_trainer("7", 0, pid=200, steps=4))
    # rank 1's producer restarted: its counters went back, so its report counts in full
    client.report_progress(_producer("7", 1, pid=300, batches=3, traffic=_traffic(0, 0, 10, 0)))
    client.report_progress(_producer("7", 1, pid=301, batches=1, traffic=_traffic(0, 0, 5, 0)))

    text = httpx.get(client.http_url + "/metrics", timeout=10).text
    series = 'dataset="rmat12",job_id="7",rank="0",tier='
    assert _metric(text, f'graphtier_tier_rows_total{{{series}"replicated"}}') == 10
    assert _metric(text, f'graphtier_tier_bytes_total{{{series}"interleaved_peer"}}') == 4 * 64
    assert _metric(text, 'graphtier_tier_bytes_total{dataset="rmat12",job_id="7",rank="1",tier="host"}') == 15 * 64
    assert _metric(text, 'graphtier_link_bytes_total{link="local"}') == 10 * 64
    assert _metric(text, 'graphtier_link_bytes_total{link="nvlink"}') == 4 * 64
    assert _metric(text, 'graphtier_link_bytes_total{link="pcie"}') == 19 * 64
    assert _metric(text, 'graphtier_link_bytes_total{link="storage"}') == 2 * 64
    assert _metric(text, 'graphtier_batches_produced_total{job_id="7",rank="1"}') == 4
    assert _metric(text, 'graphtier_batches_total{job_id="7",rank="0"}') == 4
    assert _metric(text, 'graphtier_sample_seconds_total{job_id="7",rank="0"}') == 2.5
    assert _metric(text, 'graphtier_train_seconds_total{job_id="7",rank="0"}') == pytest.approx(0.8)
    assert _metric(text, 'graphtier_producer_lag_batches{job_id="7",rank="0"}') == 3
    assert _metric(text, 'graphtier_reporter_restarts_total{job_id="7",rank="1",reporter="producer"}') == 1
    assert _metric(text, 'graphtier_dataset_bytes{dataset="rmat12",tier="host"}') == 4096 * 16 * 4
    (dataset,) = client.status().datasets
    structure = _metric(text, 'graphtier_dataset_bytes{dataset="rmat12",tier="structure_host"}')
    assert structure == dataset.structure_bytes > 0  # the whole CSC in host memory
    assert _metric(text, 'graphtier_jobs{state="running"}') == 1
    assert _metric(text, "graphtier_device_tiers_simulated") == 1

    status = client.status()
    (job,) = status.jobs
    assert job.state == "running" and job.batches_total == 4 and job.producer_lag_batches == 3
    assert job.gpu_share == GPU_SHARE  # how the producers share the GPUs, as decided at submit
    assert job.traffic.total_bytes == (20 + 15) * 64 and job.traffic.device_bytes == 14 * 64
    assert job.traffic.hit_ratio == pytest.approx(14 / 35)
    assert job.traffic.sources["host"].share == pytest.approx(19 / 35)
    assert job.val_accuracy == 0.5
    rank0, rank1 = job.ranks
    assert (rank0.trainer_pid, rank0.producer_pid, rank1.producer_pid) == (200, 100, 301)
    assert rank0.loss == 1.5 and rank0.batches_produced == 5 and rank1.batches_produced == 4
    assert status.traffic.links == {"local": 640, "nvlink": 256, "pcie": 19 * 64, "storage": 128, "network": 0}
    assert status.producer_lag_batches == 3 and status.simulated_devices
    (dataset,) = status.datasets
    assert dataset.name == "rmat12" and dataset.job_ids == ["7"] and dataset.resident_bytes > 0


def test_network_tier_per_peer_reaches_metrics_and_status_with_restarts_as_resets(running_job, inproc_daemon):
    """A partitioned job's producer: rows fetched from each peer, as the daemon's job manager reports them."""
    client, tracker = running_job, inproc_daemon.tracker

    def report(pid: int, rows: dict[str, int], wait: float) -> None:
        peers = tuple(PeerTraffic(peer, n, n * 64, 2) for peer, n in rows.items())
        traffic = TrafficCounts(
            host=SourceTraffic(10, 640), network=SourceTraffic(sum(rows.values()), 64 * sum(rows.values()))
        )
        figures = ProducerFigures(batches_total=2, traffic=traffic, network=NetworkCounters(peers, 0.5, wait))
        tracker.record(ProgressReport(job_id="7", rank=0, pid=pid, time=datetime.now(timezone.utc), figures=figures))

    report(100, {"10.0.0.2:7070": 3, "10.0.0.3:7070": 4}, 0.25)
    report(100, {"10.0.0.2:7070": 5, "10.0.0.3:7070": 4}, 0.5)
    report(101, {"10.0.0.2:7070": 1}, 0.125)  # restarted: counts in full
    text = httpx.get(client.http_url + "/metrics", timeout=10).text
    peer = 'graphtier_network_peer_{}_total{{job_id="7",peer="{}",rank="0"}}'
    assert _metric(text, peer.format("rows", "10.0.0.2:7070")) == 6
    assert _metric(text, peer.format("bytes", "10.0.0.3:7070")) == 4 * 64
    assert _metric(text, peer.format("requests", "10.0.0.2:7070")) == 4
    assert _metric(text, 'graphtier_network_wait_seconds_total{job_id="7",rank="0"}') == 0.625
    assert _metric(text, 'graphtier_link_bytes_total{link="network"}') == 10 * 64
    job = client.status().jobs[0]
    assert job.traffic.sources["network"].rows == 10 and job.traffic.links["network"] == 10 * 64
    assert [(p.peer, p.rows, p.bytes) for p in job.network.peers] == [
        ("10.0.0.2:7070", 6, 6 * 64),
        ("10.0.0.3:7070", 4, 4 * 64),
    ]
    assert job.network.rows == 10 and job.network.wait_seconds == 0.625


def test_dashboard_is_self_contained(inproc_daemon):
    page = httpx.get(inproc_daemon.endpoints.http_url + "/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "<canvas" in page.text and 'fetch("/v1/status"' in page.text
    assert "http://" not in page.text and "https://" not in page.text  # nothing is fetched from outside


def test_unknown_job_or_rank_is_not_found_and_cancel_reaches_reporters(running_job, inproc_daemon):
    client = running_job
    for job, rank, expected in (("nope", 0, "no job 'nope'"), ("7", 2, "there is no rank 2")):
        with pytest.raises(DaemonRequestError) as info:
            client.report_progress(_trainer(job, rank, pid=1, steps=1))
        assert info.value.code == "NOT_FOUND" and expected in info.value.message
    inproc_daemon.jobs.request_cancel("7", "user asked")
    assert client.report_progress(_trainer("7", 0, pid=1, steps=1)) is True


def test_report_without_reporter_kind_is_invalid_argument(inproc_daemon):
    with grpc.insecure_channel(f"unix:{inproc_daemon.config.socket}") as channel:
        stub = progress_pb2_grpc.ProgressServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ReportProgress(progress_pb2.ProgressReport(job_id="7", rank=0), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "names no reporter kind" in info.value.details()


@pytest.mark.parametrize(
    "report", [_trainer("j", 3, pid=9, steps=12), _producer("j", 1, pid=8, batches=4, traffic=_traffic(1, 2, 3, 4))]
)
def test_reports_survive_the_wire_unchanged(report):
    assert job_conversions.report_from_proto(job_conversions.report_to_proto(report)) == report


def test_batches_per_second_over_the_window_decays_when_reports_stop():
    now = [0.0]
    jobs = JobTable()
    jobs.add(JobRecord(job_id="j", dataset="d", world_size=1))
    tracker = ProgressTracker(MetricsRegistry(simulated_devices=True), jobs, window_s=10.0, clock=lambda: now[0])
    for second in range(5):
        now[0] = float(second)
        tracker.record(_trainer("j", 0, pid=1, steps=10 * (second + 1)))
    assert tracker.rates("j") == (pytest.approx(10.0), 0.0)  # 40 steps over 4 s; the first report is the baseline
    now[0] = 8.0
    assert tracker.rates()[0] == pytest.approx(40 / 8)
    now[0] = 30.0
    assert tracker.rates("j") == (0.0, 0.0)


def test_only_the_jobs_own_processes_may_report_and_a_finished_job_is_final(running_job, inproc_daemon, monkeypatch):
    client = running_job
    client.report_progress(_trainer("7", 0, pid=200, steps=4))
    steps = inproc_daemon.tracker.ranks("7")[0].trainer.steps_total
    for forged in ("", "f" * 32):  # another process of this user, without or with a guessed token
        monkeypatch.setenv(JOB_TOKEN_ENV, forged)
        with pytest.raises(DaemonRequestError) as info:
            client.report_progress(_trainer("7", 0, pid=666, steps=10_000))
        assert (
            info.value.code == "INVALID_ARGUMENT" and "only the job's own processes may report it" in info.value.message
        )
    assert inproc_daemon.tracker.ranks("7")[0].trainer.steps_total == steps  # nothing was counted
    monkeypatch.setenv(JOB_TOKEN_ENV, inproc_daemon.jobs.get("7").token)
    inproc_daemon.jobs.set_state("7", JobState.SUCCEEDED, "done")
    with pytest.raises(DaemonRequestError) as info:
        client.report_progress(_trainer("7", 0, pid=200, steps=5))
    assert "the job has succeeded; a finished job's results are final" in info.value.message
