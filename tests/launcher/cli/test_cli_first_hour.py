"""A new user's first hour, as the issue that found its rough edges tried it: `--version`, a
`--help` in the order of use, the documented Cora commands at the literature's accuracy, and
output that fits an 80-column terminal."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphtier.launcher.cli.app import ORDER_OF_USE, app

DATASETS_GUIDE = Path(__file__).resolve().parents[3] / "docs" / "guides" / "datasets.md"


def _graphtier(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_version_and_help_in_the_order_of_use():
    shown = _graphtier("--version")
    assert shown.returncode == 0 and shown.stdout == f"graphtier {version('graphtier')}\n"
    helped = _graphtier("--help")
    assert helped.returncode == 0
    listed = [m.group(1) for line in helped.stdout.splitlines() if (m := re.match(r"^│ ([a-z]+) ", line))]
    assert listed == list(ORDER_OF_USE)
    jobs = _graphtier("job", "--help").stdout
    assert [jobs.index(f"│ {c} ") for c in ("submit", "status", "list", "logs", "cancel")] == sorted(
        jobs.index(f"│ {c} ") for c in ("submit", "status", "list", "logs", "cancel")
    )
    assert all(len(line) <= 80 for line in helped.stdout.splitlines() + jobs.splitlines())


def _documented_command(prefix: str) -> list[str]:
    """The datasets guide's line starting with `prefix`, split as a shell would, comment dropped."""
    lines = [line for line in DATASETS_GUIDE.read_text().splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, f"{DATASETS_GUIDE.name} has {len(lines)} lines starting with {prefix!r}"
    return shlex.split(lines[0].split("  #")[0])[1:]  # without the leading `graphtier`


@pytest.mark.long  # the getting-started job's full length on Cora
def test_the_documented_cora_commands_reach_the_literature_accuracy(tmp_path, shared_datasets, monkeypatch):
    monkeypatch.setenv("GRAPHTIER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "80")
    runner = CliRunner()

    def cli(*args: str):
        result = runner.invoke(app, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    prepare = _documented_command("graphtier dataset prepare planetoid:")
    prepare[2] = f"planetoid:{shared_datasets / 'planetoid_cora'}"  # the guide's path is the reader's own
    cli(*prepare)
    cli("cluster", "start")
    try:
        submit = _documented_command("graphtier job submit --dataset cora --model sage")
        done = cli(*submit, "--json")
        job = json.loads(done.stdout)
        print(
            f"documented Cora job: test {job['result']['test_accuracy']:.4f}, val {job['result']['val_accuracy']:.4f}"
        )
        assert job["state"] == "succeeded" and job["result"]["test_accuracy"] >= 0.78
        assert not [n for n in job["notes"] if "covers the whole train split" in n]
        small = cli("job", "submit", "--dataset", "cora", "--epochs", "1", "--nproc-per-node", "2", "--wait")
        said = " ".join(small.output.split())  # notes are wrapped at 80 columns
        assert "note: batch 1024 x 2 rank(s) covers the whole train split (140 ids): 1 step per epoch" in said
        assert "note: no device budget" in said
        for command in (["job", "list"], ["job", "status", job["job_id"]], ["metrics"]):
            out = cli(*command).output
            assert "…" not in out and max(len(line.rstrip()) for line in out.splitlines()) <= 80, out
        assert "hit ratio 0.0%: no device budget" in cli("metrics").output
    finally:
        cli("cluster", "stop")
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()
