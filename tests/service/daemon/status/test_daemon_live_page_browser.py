"""The live page in a real browser (headless Chromium from the distribution's packages): with a job
running, its charts draw from successive /v1/status polls and its console shows no error."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
BROWSER = next((path for path in map(shutil.which, BROWSERS) if path), None)


def render(
    browser: str, url: str, *, budget_ms: int = 9000, screenshot: str | None = None
) -> subprocess.CompletedProcess:
    """Load `url` in headless Chromium for `budget_ms` of page time; stdout is the DOM then."""
    argv = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--enable-logging=stderr",
        "--v=0",
        f"--virtual-time-budget={budget_ms}",
        "--window-size=1280,1600",
        "--dump-dom",
        url,
    ]
    if screenshot:
        argv.insert(-2, f"--screenshot={screenshot}")
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed (apt-get install chromium-headless-shell)")
@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_charts_draw_and_the_console_is_clean_with_a_job_running(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()
    spec = JobSpec(
        dataset="rmat12", fanouts=[5, 5], batch_size=64, hidden=16, epochs=200, nproc_per_node=1, name="browser"
    )
    with DaemonClient(endpoints.grpc_target) as client:
        job = client.submit_job(spec)
        deadline = time.monotonic() + 120
        while client.get_job(job.job_id).state != JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.2)
        assert client.get_job(job.job_id).state == JobState.RUNNING
        page = render(BROWSER, endpoints.http_url + "/")
        state_after = client.get_job(job.job_id).state
        client.cancel_job(job.job_id, "browser test done")
    assert page.returncode == 0, page.stderr[-2000:]
    dom = page.stdout
    for chart in ("c_tp", "c_hit", "c_link"):
        drawn = re.search(rf'<canvas id="{chart}"[^>]*data-points="(\d+)"', dom)
        assert drawn and int(drawn.group(1)) >= 2, f"chart {chart} drew no line: {dom[:400]}"
    assert state_after == JobState.RUNNING  # the page was loaded while the job ran ...
    owner = re.escape(f" ({job.owner})") if job.owner is not None else ""  # the submitting user
    assert re.search(rf"<td>{job.job_id} browser{owner}</td><td>running</td>", dom)  # ... and shows it
    error = re.search(r'id="error"[^>]*>([^<]*)<', dom)
    assert error is not None and error.group(1) == "", error and error.group(1)
    console = [line for line in page.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == [], console  # the page logs nothing when all is well: any message is an error


@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium installed (apt-get install chromium-headless-shell)")
@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_the_curves_chart_a_jobs_epochs_and_the_jobs_table_shows_its_model(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=256, hidden=16, epochs=3, nproc_per_node=1, name="cv")
    with DaemonClient(endpoints.grpc_target) as client:
        job = client.submit_job(spec)
        deadline = time.monotonic() + 180
        while not client.get_job(job.job_id).state.final and time.monotonic() < deadline:
            time.sleep(0.3)
        assert client.get_job(job.job_id).state == JobState.SUCCEEDED
    page = render(BROWSER, endpoints.http_url + "/", budget_ms=5000)
    assert page.returncode == 0, page.stderr[-2000:]
    dom = page.stdout
    loss = re.search(r'<canvas id="c_loss"[^>]*data-points="(\d+)"[^>]*data-lines="([^"]*)"', dom)
    evaluation = re.search(r'<canvas id="c_eval"[^>]*data-points="(\d+)"[^>]*data-lines="([^"]*)"', dom)
    assert loss and (loss.group(1), loss.group(2)) == ("3", "train_loss"), dom[:400]
    assert evaluation and evaluation.group(1) == "3"
    assert evaluation.group(2) == "train_accuracy,test_accuracy,val_accuracy"
    assert re.search(rf'<option value="{job.job_id}"[^>]*>job {job.job_id} cv \(succeeded\)</option>', dom)
    assert re.search(r"<td>3</td><td>kept, [\d.]+ KiB</td>", dom)  # the jobs table: epochs, its model
    assert "the newest 20 succeeded jobs' models" in dom
    console = [line for line in page.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
