"""`graphtier job ...` and `graphtier demo` against a real daemon started by `graphtier cluster start`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from graphtier.launcher.cli.app import app


@pytest.fixture
def cli(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # tables unwrapped
    runner = CliRunner()

    def invoke(*args: object):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


@pytest.fixture
def running_daemon(cli, tmp_path, small_rmat):
    run = tmp_path / "run"
    started = cli("cluster", "start", "--runtime-dir", run, "--dataset-root", small_rmat.directory.parent, "--json")
    assert started.exit_code == 0, started.output
    try:
        yield run
    finally:
        stopped = cli("cluster", "stop", "--runtime-dir", run)
        assert stopped.exit_code == 0, stopped.output
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()


# Runs the CLI (its entry point, so `job status` and `job list` take the short path that skips
# building the Typer application) with torch, numpy and the daemon's modules made unimportable:
# the control commands talk to the daemon through the contract package alone and answer in a
# fraction of a second (numpy alone costs them a tenth of one; bench_cli_latency.py measures them).
# The packages named in $GRAPHTIER_TEST_REFUSED are refused too.
_WITHOUT_TORCH = """
import os, sys

REFUSED = ("torch", "numpy", *os.environ.get("GRAPHTIER_TEST_REFUSED", "").split())

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED or name.startswith("graphtier.service.daemon"):
            raise ImportError(f"{name} imported by a control command")

sys.meta_path.insert(0, Refuse())
from graphtier.launcher.cli.entry import main
sys.argv[0] = "graphtier"
main()
"""


def run_without_torch_or_daemon_code(*args: object, refused: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200", "GRAPHTIER_TEST_REFUSED": refused},
    )


# What `job status` (the short path) must answer without: the contract's pydantic models, the CLI's parser
# and rich; `job list` draws its table with rich.
LEAN_STATUS, LEAN_LIST = "pydantic typer rich", "pydantic typer"


def assert_short_path_answers_as_typer(cli, *args: object, refused: str = LEAN_STATUS) -> None:
    """`graphtier ARGS` through the short path in a fresh process prints and exits exactly as through the Typer app;
    for `job status`, the app answers with `--watch` (on a finished job: at once), the contract models' path."""
    argv = [*map(str, args), *(["--watch"] if args[1] == "status" else [])]
    typer_way, short = cli(*argv), run_without_torch_or_daemon_code(*args, refused=refused)
    assert short.returncode == typer_way.exit_code, f"{args}: {short.stderr} / {typer_way.output}"
    assert short.stdout + short.stderr == typer_way.output, args


def test_bad_job_specs_are_refused_before_anything_runs(cli, tmp_path):
    run = tmp_path / "run"
    bad = cli("job", "submit", "--dataset", "rmat12", "--dropout", "1.5", "--runtime-dir", run)
    assert bad.exit_code == 2 and "command line: invalid job spec: dropout" in bad.output
    spec = tmp_path / "job.yaml"
    spec.write_text("dataset: rmat12\nmodel: transformer\nepochz: 3\n")
    bad = cli("job", "submit", "--spec", spec, "--runtime-dir", run)
    assert bad.exit_code == 2 and f"{spec}: invalid job spec: model" in bad.output and "epochz" in bad.output
    gpu = cli("job", "submit", "--dataset", "rmat12", "--sampler", "gpu", "--runtime-dir", run)
    assert gpu.exit_code == 2 and gpu.output.count("\n") == 1
    assert (
        "invalid job spec: (top): Value error, sampler 'gpu' samples on the ranks' GPUs: it needs device cuda, not cpu"
        in gpu.output
    )
    spec.write_text("dataset: rmat12\ndevice: cpu\nsampler: gpu\n")
    gpu = cli("job", "submit", "--spec", spec, "--runtime-dir", run)
    assert gpu.exit_code == 2 and f"{spec}: invalid job spec" in gpu.output and "it needs device cuda" in gpu.output
    assert cli("job", "submit", "--spec", spec, "--sampler", "tpu", "--runtime-dir", run).exit_code == 2
    words = "--fanout '15,x': expected comma-separated integers like 15,10,5 (-1 = all neighbours)"
    bad = cli("job", "submit", "--dataset", "rmat12", "--fanout", "15,x", "--runtime-dir", run)
    assert bad.exit_code == 2 and words in bad.output  # as `dataset tiering-report` and `connect()` say it
    fanout = "paper-cites-paper:x;5"
    hetero = cli("job", "submit", "--dataset", "acm", "--model", "rgcn", "--fanout", fanout, "--runtime-dir", run)
    assert (
        hetero.exit_code == 2 and "relation_fanouts: Value error, hop 1: 'paper-cites-paper:x' is not" in hetero.output
    )
    bad_hops = {
        "99999999999,5": "from 1 to 2147483647",  # past int32: refused, not a traceback
        "paper-cites-paper:99999999999;5": "from 1 to 2147483647",
        "paper-cites-paper:5;0": "hop 2: '0' expands no relation",  # not '0 (skip a relation)' refused
    }
    for fanout, problem in bad_hops.items():
        bad = cli("job", "submit", "--dataset", "acm", "--model", "rgcn", "--fanout", fanout, "--runtime-dir", run)
        assert bad.exit_code == 2 and problem in bad.output, bad.output
    hetero = cli("job", "submit", "--dataset", "acm", "--model", "hgt", "--device", "cuda", "--runtime-dir", run)
    assert hetero.exit_code == 2 and "model hgt: device='cuda' is not supported" in hetero.output
    nothing = cli("job", "list", "--runtime-dir", run, "--json")
    assert nothing.exit_code != 0 and "start one with `graphtier cluster start`" in nothing.output


def test_a_key_given_twice_or_hops_that_disagree_are_refused_naming_them(cli, tmp_path):
    """A spec or daemon config holding one key twice is refused naming the key and its lines (YAML would keep
    the last silently); fanouts and relation_fanouts naming different hop counts are refused, not one dropped."""
    run = tmp_path / "run"
    spec = tmp_path / "job.yaml"
    refusals = {  # the file, and what its one line of refusal says
        "dataset: rmat12\nepochs: 1\ndataset: acm\n": "line 3: key 'dataset' is given twice (first on line 1)",
        "dataset: acm\nmodel: rgcn\nfanouts: [5, 5, 5]\nrelation_fanouts: ['5', '5']\n": (
            "fanouts [5, 5, 5] name 3 hop(s) but relation_fanouts ['5', '5'] name 2"
        ),
        "dataset: rmat12\nfanout: [5, 5]\n": "fanout: Extra inputs are not permitted (did you mean 'fanouts'?)",
        "dataset: rmat12\n  epochs: [\n": (
            f"{spec}: not valid YAML (line 2, column 9: mapping values are not allowed here)"
        ),
    }
    for text, said in refusals.items():
        spec.write_text(text)
        refused = cli("job", "submit", "--spec", spec, "--runtime-dir", run)
        assert refused.exit_code == 2 and refused.output.count("\n") == 1 and said in refused.output, refused.output
    config = tmp_path / "daemon.yaml"
    config.write_text("max_running_jobs: 1\nmax_running_jobs: 4\n")
    started = cli("cluster", "start", "--config", config, "--runtime-dir", run)
    assert started.exit_code == 2 and "key 'max_running_jobs' is given twice" in started.output
    config.write_text("max_running_job: 4\n")
    started = cli("cluster", "start", "--config", config, "--runtime-dir", run)
    assert started.exit_code == 2 and "(did you mean 'max_running_jobs'?)" in started.output, started.output
    assert not (run / "daemon.sock").exists()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_fanout_flag_overrides_a_spec_files_relation_fanouts(cli, tmp_path, prepared_acm, running_daemon):
    """`--fanout 6,6,6` over a spec file's per-relation hops runs the flag's 3 hops (`flags override its fields`),
    not the file's 2 with the flag dropped."""
    spec = tmp_path / "acm.yaml"
    spec.write_text("dataset: acm\nmodel: rgcn\nhidden: 8\nepochs: 1\nrelation_fanouts: ['3', '4']\n")
    args = ("job", "submit", "--spec", spec, "--runtime-dir", running_daemon, "--json")
    submitted = cli(*args, "--fanout", "6,6,6")
    assert submitted.exit_code == 0, submitted.output
    job = json.loads(submitted.stdout)
    assert job["spec"]["fanouts"] == [6, 6, 6] and job["spec"]["relation_fanouts"] == []
    assert cli("job", "cancel", job["job_id"], "--runtime-dir", running_daemon).exit_code == 0
    submitted = cli(*args)  # the file's own hops without the flag
    assert submitted.exit_code == 0, submitted.output
    job = json.loads(submitted.stdout)
    assert job["spec"]["fanouts"] == [3, 4] and job["spec"]["relation_fanouts"] == ["3", "4"]
    assert cli("job", "cancel", job["job_id"], "--runtime-dir", running_daemon).exit_code == 0
    spec.write_text("dataset: acm\nmodel: rgcn\nhidden: 8\nepochs: 1\nfanouts: [5, 5, 5]\n")
    submitted = cli(*args, "--fanout", "3;4")  # per-relation hops over the file's plain ones: the flag's 2
    assert submitted.exit_code == 0, submitted.output
    job = json.loads(submitted.stdout)
    assert job["spec"]["fanouts"] == [3, 4] and job["spec"]["relation_fanouts"] == ["3", "4"]
    assert cli("job", "cancel", job["job_id"], "--runtime-dir", running_daemon).exit_code == 0


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_submit_wait_status_list_logs_cancel(cli, tmp_path, running_daemon, small_rmat):
    run = running_daemon
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "dataset: rmat12\nmodel: gcn\nfanouts: [5, 5]\nbatch_size: 128\nhidden: 16\nepochs: 3\n"
        "nproc_per_node: 2\nname: from-yaml\n"
    )
    unknown = cli("job", "submit", "--dataset", "nope", "--runtime-dir", run)
    assert unknown.exit_code == 1 and "no prepared dataset 'nope'" in unknown.output
    if not torch.cuda.is_available():  # the daemon's machine has no GPU: a GPU sampler is refused at submit
        gpu = cli("job", "submit", "--dataset", "rmat12", "--device", "cuda", "--sampler", "gpu", "--runtime-dir", run)
        assert (
            gpu.exit_code == 2 and gpu.output.count("\n") == 1 and "device 'cuda' needs one CUDA device" in gpu.output
        )

    done = cli("job", "submit", "--spec", spec, "--epochs", "1", "--wait", "--json", "--runtime-dir", run)
    assert done.exit_code == 0, done.output
    job = json.loads(done.stdout)
    assert job["state"] == "succeeded" and job["spec"]["model"] == "gcn" and job["spec"]["epochs"] == 1
    assert job["spec"]["sampler"] == "cpu"  # auto, resolved for a CPU job
    assert 0 < job["result"]["val_accuracy"] <= 1 and 0 < job["result"]["test_accuracy"] <= 1
    best = job["result"]["best"]  # one epoch: the best validation epoch is the last
    assert best == {**best, "epoch": 0, "selected_by": "val_accuracy", "metrics": {}}
    last = job["result"]
    assert (best["val_accuracy"], best["test_accuracy"]) == (last["val_accuracy"], last["test_accuracy"])
    job_id = job["job_id"]

    status = cli("job", "status", job_id, "--runtime-dir", run)
    assert status.exit_code == 0 and f"job {job_id} [succeeded] gcn on rmat12" in status.output
    assert "sampling on cpu" in status.output
    assert "val accuracy" in status.output and "test accuracy" in status.output
    assert f"at best val accuracy {best['val_accuracy']:.4f} (epoch 1/1): test accuracy" in status.output
    listed = json.loads(cli("job", "list", "--json", "--runtime-dir", run).stdout)
    assert [(j["job_id"], j["spec"]["name"]) for j in listed] == [(job_id, "from-yaml")]
    table = cli("job", "list", "--runtime-dir", run).output
    assert "from-yaml" in table and f"{best['test_accuracy']:.4f} (1)" in table, table
    logs = cli("job", "logs", job_id, "--runtime-dir", run)
    assert logs.exit_code == 0 and "[rank 0] done" in logs.stdout and "[rank 1]" in logs.stdout
    lines = [
        json.loads(line) for line in cli("job", "logs", job_id, "--json", "--runtime-dir", run).stdout.splitlines()
    ]
    assert any(line["from_producer"] for line in lines) and all("text" in line for line in lines)

    for command in (  # job status and job list: below, against the Typer app's answers
        ["job", "logs", job_id],
        ["metrics"],
        ["cluster", "status"],
    ):
        plain = run_without_torch_or_daemon_code(*command, "--runtime-dir", run)
        assert plain.returncode == 0, f"graphtier {' '.join(command)}: {plain.stderr}"
    for short in (
        ["job", "status", job_id, "--runtime-dir", run],
        ["job", "status", job_id, "--json", "--runtime-dir", run],
        ["job", "status", "999", "--runtime-dir", run],  # no such job: exit 1
        ["job", "status", job_id, "--runtime-dir", tmp_path / "no-daemon"],  # exit 1
    ):
        assert_short_path_answers_as_typer(cli, *short)
    assert_short_path_answers_as_typer(cli, "job", "list", "--runtime-dir", run, refused=LEAN_LIST)
    plain = run_without_torch_or_daemon_code("job", "list", "--json", "--runtime-dir", run, refused=LEAN_STATUS)
    assert json.loads(plain.stdout) == listed
    listed = run_without_torch_or_daemon_code("dataset", "list", "--out", small_rmat.directory.parent, "--json")
    assert listed.returncode == 0 and "rmat12" in [d["name"] for d in json.loads(listed.stdout)], listed.stderr

    again = cli("job", "cancel", job_id, "--runtime-dir", run)
    assert again.exit_code == 1 and f"job '{job_id}' has already ended (succeeded)" in again.output

    waiting = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "job",
            "submit",
            "--spec",
            str(spec),
            "--epochs",
            "500",
            "--batch-size",
            "16",
            "--wait",
            "--runtime-dir",
            str(run),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = json.loads(cli("job", "list", "--json", "--runtime-dir", run).stdout)
            if jobs[0]["job_id"] != job_id and jobs[0]["state"] == "running":
                break
            time.sleep(0.3)
        second = jobs[0]["job_id"]
        waiting.send_signal(signal.SIGINT)  # Ctrl-C while following: detach, the job goes on
        _, err = waiting.communicate(timeout=30)
    finally:
        waiting.kill()
    assert waiting.returncode == 130, err
    assert f"detached from job {second}; it keeps running" in err and f"graphtier job cancel {second}" in err
    assert json.loads(cli("job", "status", second, "--json", "--runtime-dir", run).stdout)["state"] == "running"
    cancelled = cli("job", "cancel", second, "--reason", "enough", "--json", "--runtime-dir", run)
    assert cancelled.exit_code == 0 and json.loads(cancelled.stdout)["state"] == "cancelled"
    status = cli("job", "status", second, "--runtime-dir", run)
    assert status.exit_code == 3 and "[cancelled]" in status.output and "enough" in status.output
    assert_short_path_answers_as_typer(cli, "job", "status", second, "--runtime-dir", run)  # exit 3 too


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path):
    env = {**os.environ, "GRAPHTIER_HOME": str(tmp_path / "home"), "COLUMNS": "160"}
    result = subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", "demo", "--scale", "13"],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout + result.stderr
    assert "started graphtierd" in out and "prepared rmat-13" in out and "[succeeded]" in out
    assert ("the daemon sees no GPU: 2 CPU rank(s)" if not torch.cuda.is_available() else "cuda rank(s)") in out
    assert "val accuracy" in out and "feature traffic by tier" in out and "stopped graphtierd" in out
    assert not (tmp_path / "home" / "run" / "daemon.lock").exists()


def test_producer_gpu_share_options_out_of_range_or_without_a_gpu_are_refused_in_one_line(cli, tmp_path):
    run = tmp_path / "run"
    for flags, message in (
        (["--producer-sm-share", "0"], "producer_sm_share: Input should be greater than 0"),
        (["--producer-sm-share", "150"], "producer_sm_share: Input should be less than or equal to 100"),
        (["--mps", "use"], "mps 'use' shares the ranks' GPUs with their producers: it needs device cuda, not cpu"),
        (["--mps", "sometimes"], "mps: Input should be 'auto', 'off', 'use' or 'manage'"),
    ):
        bad = cli("job", "submit", "--dataset", "rmat12", *flags, "--runtime-dir", run)
        assert bad.exit_code == 2 and bad.output.count("\n") == 1 and message in bad.output, bad.output
    spec = tmp_path / "job.yaml"
    spec.write_text("dataset: rmat12\ndevice: cuda\nmps: manage\nproducer_sm_share: -5\n")
    bad = cli("job", "submit", "--spec", spec, "--runtime-dir", run)
    assert bad.exit_code == 2 and "producer_sm_share: Input should be greater than 0" in bad.output


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_daemon_refuses_mps_it_cannot_give_before_anything_runs(cli, tmp_path, small_rmat, monkeypatch):
    """No nvidia-cuda-mps-control on the daemon's PATH and no control daemon at its pipe directory:
    `--mps manage` and `--mps use` are refused at submit, one line each, exit 2."""
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(tmp_path / "no-mps"))
    paths = os.environ["PATH"].split(os.pathsep)
    without = [p for p in paths if p and not os.path.exists(os.path.join(p, "nvidia-cuda-mps-control"))]
    monkeypatch.setenv("PATH", os.pathsep.join(without))
    run = tmp_path / "run"
    started = cli("cluster", "start", "--runtime-dir", run, "--dataset-root", small_rmat.directory.parent, "--json")
    assert started.exit_code == 0, started.output
    try:
        for mode, message in (
            ("manage", "mps 'manage' needs nvidia-cuda-mps-control on the daemon's PATH"),
            ("use", f"mps 'use' needs a running MPS control daemon, but none is at {tmp_path / 'no-mps'}/control"),
        ):
            bad = cli("job", "submit", "--dataset", "rmat12", "--device", "cuda", "--mps", mode, "--runtime-dir", run)
            assert bad.exit_code == 2 and bad.output.count("\n") == 1 and message in bad.output, bad.output
        assert json.loads(cli("job", "list", "--json", "--runtime-dir", run).stdout) == []
    finally:
        stopped = cli("cluster", "stop", "--runtime-dir", run)
        assert stopped.exit_code == 0, stopped.output


def test_job_status_says_how_a_cuda_jobs_producers_share_the_gpus():
    from datetime import datetime, timezone

    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.contract.jobs.state import JobState
    from graphtier.contract.jobs.view import JobInfo
    from graphtier.launcher.cli.job import describe

    share = "producers capped by grid to ~10% of the SMs: no MPS control daemon at /tmp/nvidia-mps/control (mps auto)"
    job = JobInfo(
        job_id="4",
        spec=JobSpec(dataset="d", device="cuda"),
        state=JobState.RUNNING,
        message="",
        created_at=datetime.now(timezone.utc),
        gpu_share=share,
    )
    text = describe(job)
    assert "GPU share: producers capped by grid to ~10% of the SMs" in text and "(mps auto)" in text
    assert all(len(line) <= 80 for line in text.splitlines())
    cpu = JobInfo(**{**job.__dict__, "spec": JobSpec(dataset="d"), "gpu_share": "producers use no GPU: a CPU job"})
    assert "GPU share" not in describe(cpu)
