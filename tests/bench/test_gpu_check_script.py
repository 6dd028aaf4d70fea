"""tests/bench/gpu_check.sh where no GPU is needed, so its plumbing never meets a device untested: it
parses and refuses bad arguments naming them; its --dry-run runs the whole control flow (every CUDA
step a no-op, the smoke harness for real, the steps' time simulated) within the 420 s budget and
leaves exactly one tarball; a short deadline skips steps and still archives; a run killed in the
middle leaves the archive of the steps done. Also the smoke harness and the job summary on their own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "tests" / "bench"
SCRIPTS = [BENCH / "gpu_check.sh", BENCH / "gpu_jobs.sh", BENCH / "gpu_wheels.sh"]
STEPS = [
    "environment",
    "wheels",
    "build",
    "kernels",
    "smoke",
    "gpu-core",
    "gpu-kernels",
    "gpu-rest",
    "mps",
    "job",
    "gpu-probe",
    "bench-gpu-gather",
]
BUDGET_S = 420


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHON": sys.executable, **extra}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS[0]), *args], cwd=REPO, capture_output=True, text=True, timeout=120, env=env or _env()
    )


def _archive_of(done: subprocess.CompletedProcess[str], out: Path) -> Path:
    archive = Path(re.fullmatch(r"archive: (.+)", done.stdout.splitlines()[-1]).group(1))
    assert archive.parent == out and list(out.iterdir()) == [archive]
    assert not Path("/tmp", archive.name.removesuffix(".tar.gz")).exists()  # the work directory is gone
    return archive


def _members(archive: Path) -> dict[str, str]:
    """Every file of the archive by its name, as text."""
    with tarfile.open(archive) as tar:
        return {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def _summary(files: dict[str, str]) -> list[list[str]]:
    return [line.split("\t") for line in files["summary.tsv"].splitlines()[1:]]


def _assert_within(ran: list[list[str]], deadline: int) -> None:
    """No step that ran could have outlasted the deadline (less the archive's reserve): each one's limit
    ends by then, counted on the dry run's simulated clock."""
    start = 0
    for name, _, seconds, limit in ran:
        assert start + int(limit) <= deadline - 10, f"{name} may run to {start + int(limit)} s"
        start += int(seconds)


def test_scripts_parse():
    for script in SCRIPTS:
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


def test_bad_arguments_are_refused_naming_them():
    for args, message in [
        (["--bogus"], "unknown argument '--bogus'"),
        (["--deadline", "ten"], "--deadline needs whole"),
        (["--out"], "--out needs a directory"),
    ]:
        done = _run(*args)
        assert done.returncode == 2 and message in done.stderr, done.stderr


def test_the_dry_run_runs_every_step_within_the_budget_and_leaves_one_archive(tmp_path):
    t0 = time.monotonic()
    done = _run("--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - t0 < 60
    files = _members(_archive_of(done, tmp_path))
    rows = _summary(files)
    assert [row[0] for row in rows] == STEPS
    ran = [row for row in rows if row[1] != "skipped (deadline)"]
    assert [row[0] for row in ran][:10] == STEPS[:10] and all(row[1] == "0" for row in ran)
    _assert_within(ran, BUDGET_S)
    plan = files["plan.txt"]
    # built once, by pip, with the ops' compiler output kept; the kernels read from that log, never recompiled
    assert plan.count("-m pip install -v --no-build-isolation --no-deps -e .") == 1
    assert "cuda_compile.py --from-log" in plan and re.search(r"cuda_compile\.py (?!--from-log)", plan) is None
    assert "test_gpu_kernels_compile" not in plan
    groups = {name: re.search(rf"^{name} \(.*?-m pytest (.*?) -p no:cacheprovider", plan, re.M) for name in STEPS[5:9]}
    assert all(groups.values()), plan
    assert groups["gpu-core"].group(1).split()[0] == "tests/service/gpu/test_gpu_memory_handles.py"  # first
    assert groups["mps"].group(1) == "tests/service/gpu/test_gpu_mps.py"  # alone, in a process of its own
    assert all("test_gpu_mps" not in groups[g].group(1) for g in ("gpu-core", "gpu-kernels", "gpu-rest"))
    for name in ("gpu-core", "gpu-kernels", "gpu-rest"):
        assert f'--timeout 60 --maxfail 5 --junitxml "$DIR/{name}.xml"' in plan
    assert "--device cuda --nproc-per-node 1 --num-devices 1 --device-replicated 10% --mps manage" in plan
    assert files["job-lacked.txt"].startswith("1 rank: this machine has 1 GPU(s)")
    smoke = json.loads(files["smoke.json"])  # the harness ran, every check a no-op
    assert smoke["dry_run"] and len(smoke["checks"]) == 9
    assert all(c["status"] == "works" for c in smoke["checks"].values())
    assert "== summary (" in done.stdout and ", simulated)" in done.stdout


def test_a_short_deadline_skips_the_steps_that_would_start_too_late_and_still_archives(tmp_path):
    done = _run("--dry-run", "--deadline", "160", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = _summary(_members(_archive_of(done, tmp_path)))
    skipped = [row[0] for row in rows if row[1] == "skipped (deadline)"]
    assert skipped and skipped == [row[0] for row in rows][-len(skipped) :]  # the later steps
    assert "gpu-core" in skipped and "job" in skipped
    _assert_within([row for row in rows if row[0] not in skipped], 160)
    assert "== gpu-core: skipped" in done.stdout


def _session(leader: int) -> list[int]:
    """The processes of the session `leader` started (field 6 of /proc/PID/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == leader and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _kill_session(leader: int) -> None:
    """SIGKILL every process of the session `leader` started (timeout(1) gives its command a process
    group of its own, so killing the leader's group would leave them), again until none is left: a
    process forked while the first pass ran is caught by the next."""
    deadline = time.monotonic() + 10
    while (alive := _session(leader)) and time.monotonic() < deadline:
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    assert not _session(leader), f"processes of session {leader} outlived SIGKILL"


def test_a_run_killed_in_a_step_leaves_the_archive_of_the_steps_before_it(tmp_path):
    """The device command can be killed at its time limit: every finished step is already in the tarball."""
    out = tmp_path / "out"
    run = subprocess.Popen(
        ["bash", str(SCRIPTS[0]), "--dry-run", "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(DRY_STALL_STEP="job"),
        start_new_session=True,
    )
    work = None
    try:
        assert run.stdout is not None
        deadline = time.monotonic() + 60
        for line in run.stdout:
            if line.startswith("== job"):
                break
            assert time.monotonic() < deadline, "the dry run never reached the job step"
        archives = list(out.glob("*.tar.gz"))
        assert len(archives) == 1
        work = Path("/tmp", archives[0].name.removesuffix(".tar.gz"))
    finally:
        _kill_session(run.pid)
        run.wait(timeout=30)
        run.stdout.close()
    files = _members(archives[0])
    assert [row[0] for row in _summary(files)] == STEPS[:9]  # up to mps; the job never finished
    assert {"smoke.json", "gpu-core.log", "mps.log", "plan.txt"} <= set(files)
    assert work is not None and work.exists()  # killed: nothing cleaned up but what the archive holds
    import shutil

    shutil.rmtree(work)


def test_out_defaults_to_the_out_environment_variable(tmp_path):
    done = _run("--dry-run", env=_env(OUT=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith(f"archive: {tmp_path}/gpu-check-")


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_smoke_harness_refuses_unknown_checks_and_reports_a_refusal_with_its_error(tmp_path):
    smoke = [sys.executable, str(BENCH / "gpu_smoke.py")]
    bad = subprocess.run([*smoke, "--only", "versions,bogus"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown check(s) ['bogus']" in bad.stderr
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible: the refusal below is of a machine without one")
    done = subprocess.run(
        [*smoke, "--only", "versions", "--json", str(tmp_path / "s.json")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stdout + done.stderr  # no usable GPU
    assert re.match(r"smoke versions +refused +RuntimeError: torch sees no CUDA device; torch ", done.stdout)
    result = json.loads((tmp_path / "s.json").read_text())["checks"]["versions"]
    assert result["status"] == "refused" and "cuda-bindings" in result["error"]


def test_the_job_summary_names_the_figures_and_what_the_job_lacked(tmp_path):
    job = {
        "job_id": "3",
        "state": "succeeded",
        "progress": {
            "global_step": 120,
            "batches_per_second": 9.5,
            "traffic": {"replicated": {"rows": 10, "bytes": 3 << 20}, "host": {"rows": 5, "bytes": 0}},
        },
        "result": {"train_seconds": 12.0, "val_accuracy": 0.5},
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    (tmp_path / "lacked.txt").write_text("no MPS: its test did not pass here\n")
    command = [
        sys.executable,
        str(BENCH / "gpu_check_job.py"),
        str(tmp_path / "job.json"),
        str(tmp_path / "lacked.txt"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        "job 3: succeeded, 120 steps in 12.0 s = 10.00 steps/s (last 9.50 batches/s), val 0.500; "
        "bytes replicated 3.0 MiB",
        "lacked: no MPS: its test did not pass here",
    ]
    (tmp_path / "job.json").write_text("")
    failed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 1 and failed.stdout.startswith("job: no JSON from the job")
