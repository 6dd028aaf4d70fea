"""tests/bench/gpu_check.sh where no GPU is needed: it parses, refuses bad arguments naming them, and
a --dry-run plans every step within the deadline and leaves exactly one tarball, its path printed last."""

from __future__ import annotations

import os
import re
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [REPO / "tests" / "bench" / "gpu_check.sh", REPO / "tests" / "bench" / "gpu_jobs.sh"]
STEPS = ["environment", "kernels", "build", "gpu-tests", "demo", "gpu-probe", "bench-gpu-gather"]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPTS[0]), *args], cwd=REPO, capture_output=True, text=True, timeout=60, env=env, check=False
    )


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


def test_dry_run_plans_every_step_and_leaves_one_archive(tmp_path):
    done = _run("--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    archive = Path(re.fullmatch(r"archive: (.+)", done.stdout.splitlines()[-1]).group(1))
    assert archive.parent == tmp_path and list(tmp_path.iterdir()) == [archive]
    assert not Path("/tmp", archive.name.removesuffix(".tar.gz")).exists()  # the work directory is gone
    with tarfile.open(archive) as tar:
        names = {Path(n).name for n in tar.getnames()}
        plan = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("plan.txt"))).read().decode()
        summary = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("summary.tsv"))).read().decode()
    assert {"plan.txt", "summary.tsv"} <= names
    planned = [line.split("\t") for line in summary.splitlines()[1:]]
    assert [
        row[0] for row in planned if row[0] != "wheels"
    ] == STEPS  # wheels: where .whl/ has any and all(row[1] == "planned" for row in planned)
    assert all(int(row[3]) <= 570 for row in planned)
    assert "tests/service/gpu/cuda_compile.py" in plan and "tests/bench/gpu_probe.py" in plan


def test_out_defaults_to_the_out_environment_variable(tmp_path):
    done = _run("--dry-run", env={**os.environ, "OUT": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith(f"archive: {tmp_path}/gpu-check-")
