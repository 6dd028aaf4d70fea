"""A job's storage reads and look-ahead window: set in its spec, reported with the other tiers
(/v1/status, /metrics, `graphtier metrics`), every storage row counted once."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.cli.app import app
from graphtier.launcher.client import DaemonClient


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_storage_reads_and_window_reach_the_status_the_metrics_and_the_cli(inproc_daemon):
    spec = JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=128,
        hidden=16,
        epochs=2,
        nproc_per_node=1,
        budgets=BudgetSpec(host="40%"),
        storage_reads="page-cache",
        window=2,
        name="window",
    )
    run = inproc_daemon.config.runtime_dir
    with DaemonClient(runtime_dir=run) as client:
        job = client.submit_job(spec)
        assert (job.spec.storage_reads, job.spec.window) == ("page-cache", 2)  # through the proto and back
        list(client.job_events(job.job_id, follow=True))
        final = client.get_job(job.job_id)
        assert final.state == JobState.SUCCEEDED, f"{final.message}\n{open(final.log_path).read()[-3000:]}"
        status = client.status()
        exposition = client.metrics_text()
    j = next(j for j in status.jobs if j.job_id == job.job_id)
    s, gathered = j.storage, j.traffic.sources["storage"].rows
    assert (s.mode, s.window) == ("page-cache", 2)
    assert s.read_rows + s.window_rows == gathered > 0 and s.window_rows > 0  # each storage row once
    assert s.window_hit_ratio == pytest.approx(s.window_rows / gathered)
    assert s.requests > 0 and s.read_bytes >= s.read_rows * 64 and s.queue_depth > 0 and s.bandwidth > 0
    assert status.storage.read_rows == s.read_rows and status.storage.window_rows == s.window_rows
    row_bytes = s.window_bytes // s.window_rows
    assert s.read_row_bytes == s.read_rows * row_bytes and s.read_amplification == s.read_bytes / s.read_row_bytes
    assert s.read_amplification >= 1.0  # page-cache requests are whole pages: never less than the rows
    labels = f'{{job_id="{job.job_id}",rank="0"}}'
    assert f"graphtier_storage_read_rows_total{labels} {float(s.read_rows)}" in exposition
    assert f"graphtier_window_hit_rows_total{labels} {float(s.window_rows)}" in exposition
    assert f"graphtier_storage_requests_total{labels} {float(s.requests)}" in exposition
    assert f"graphtier_storage_read_row_bytes_total{labels} {float(s.read_row_bytes)}" in exposition
    table = CliRunner().invoke(
        app, ["metrics", "--runtime-dir", str(run)], catch_exceptions=False, env={"COLUMNS": "250"}
    )
    assert table.exit_code == 0 and "storage tier by job" in table.output and "page-cache" in table.output
    assert f"{s.window_rows:,}" in table.output
    # the job's own view (GetJob over gRPC, `graphtier job status`): the same counters, summed over its producers
    p = final.progress.storage
    assert (p.mode, p.window, p.read_rows, p.window_rows, p.requests, p.read_bytes, p.read_row_bytes) == (
        s.mode,
        s.window,
        s.read_rows,
        s.window_rows,
        s.requests,
        s.read_bytes,
        s.read_row_bytes,
    )
    shown = CliRunner().invoke(app, ["job", "status", job.job_id, "--runtime-dir", str(run)], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    assert (
        f"storage tier (page-cache, window 2): {p.rows:,} rows, {p.window_hit_ratio:.1%} from the window"
        in shown.output
    )
    assert f"({p.read_amplification:.2f}x the rows' bytes)" in shown.output


def test_a_bad_storage_read_mode_or_window_is_refused_at_submit(inproc_daemon):
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        for bad, named in (({"storage_reads": "o_direct"}, "'o_direct'"), ({"window": 65}, "window")):
            spec = JobSpec(dataset="rmat12").model_copy(update=bad)  # unchecked here: the daemon must refuse it
            with pytest.raises(DaemonRequestError, match=named):
                client.submit_job(spec)
