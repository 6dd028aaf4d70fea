"""`graphtier job submit --script`: the user's file through the CLI, and the mistakes refused at the door."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.cli.app import app

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()

    def invoke(*args: object):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def _one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    return lines[0]


def test_bad_scripts_and_arguments_exit_2_with_one_line(cli, tmp_path):
    run = tmp_path / "run"  # no daemon: each of these is refused before one is asked
    line = _one_line_error(
        cli("job", "submit", "--dataset", "d", "--script", tmp_path / "nope.py", "--runtime-dir", run)
    )
    assert line == f"error: --script {tmp_path / 'nope.py'}: no such file"
    line = _one_line_error(cli("job", "submit", "--dataset", "d", "--script", tmp_path, "--runtime-dir", run))
    assert line == f"error: --script {tmp_path}: not a file"
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    line = _one_line_error(
        cli("job", "submit", "--dataset", "d", "--script", script, "--script-args", "--tag 'x", "--runtime-dir", run)
    )
    assert line.startswith('error: --script-args "--tag \'x": No closing quotation')
    line = _one_line_error(cli("job", "submit", "--dataset", "d", "--script-args", "--x 1", "--runtime-dir", run))
    assert "args ['--x', '1'] need a script to pass them to" in line
    spec = tmp_path / "job.yaml"
    spec.write_text("dataset: d\nscript: missing.py\n")
    line = _one_line_error(cli("job", "submit", "--spec", spec, "--runtime-dir", run))
    assert line == f"error: {spec}: script {tmp_path / 'missing.py'}: no such file"


def test_a_yaml_spec_names_its_script_relative_to_itself(tmp_path):
    (tmp_path / "jobs").mkdir()
    spec = tmp_path / "jobs" / "job.yaml"
    spec.write_text("dataset: cora\nscript: ../train.py\nargs: ['--layers', '3']\nepochs: 5\n")
    loaded = JobSpec.from_yaml(spec)
    assert loaded.script == str(tmp_path.resolve() / "train.py") and loaded.args == ["--layers", "3"]
    assert loaded.trains == "script train.py"
    with pytest.raises(InvalidRequestError, match="script 'train.py' must be an absolute path"):
        JobSpec.build({"dataset": "cora", "script": "train.py"})


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_submit_a_script_with_budget_flags_and_follow_it(cli, tmp_path, small_rmat):
    run = tmp_path / "run"
    started = cli("cluster", "start", "--runtime-dir", run, "--dataset-root", small_rmat.directory.parent, "--json")
    assert started.exit_code == 0, started.output
    try:
        done = cli(
            "job",
            "submit",
            "--dataset",
            "rmat12",
            "--script",
            EXAMPLES / "sage_blocks.py",
            "--script-args",
            "--eval-every 1",
            "--fanout",
            "5,5",
            "--batch-size",
            "64",
            "--epochs",
            "2",
            "--nproc-per-node",
            "2",
            "--num-devices",
            "2",
            "--device-replicated",
            "5%",
            "--device-interleaved",
            "10%",
            "--wait",
            "--json",
            "--runtime-dir",
            run,
        )
        assert done.exit_code == 0, done.output
        job = json.loads(done.stdout)
        assert job["state"] == "succeeded" and job["spec"]["script"] == str(EXAMPLES / "sage_blocks.py")
        assert job["spec"]["args"] == ["--eval-every", "1"] and job["result"]["test_accuracy"] > 0
        assert job["spec"]["budgets"] == {
            "num_devices": 2,
            "device_replicated": "5%",
            "device_interleaved": "10%",
            "host": None,
            "structure_device": "",
        }
        assert job["progress"]["traffic"]["replicated"]["bytes"] > 0  # the budget placed rows on the device tiers
        status = cli("job", "status", job["job_id"], "--runtime-dir", run)
        assert (
            status.exit_code == 0
            and f"job {job['job_id']} [succeeded] script sage_blocks.py on rmat12" in status.output
        )
        logs = cli("job", "logs", job["job_id"], "--runtime-dir", run).stdout
        assert "[rank 0] epoch 0: {'val': " in logs and "[rank 1] final accuracy" not in logs
    finally:
        stopped = cli("cluster", "stop", "--runtime-dir", run)
        assert stopped.exit_code == 0, stopped.output
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()
