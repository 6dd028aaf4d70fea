"""`graphtier doctor` as a user runs it: a real subprocess, its JSON and its 80-column table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphtier.contract.machine import CHECK_NAMES, MachineReport

THP = Path("/sys/kernel/mm/transparent_hugepage")


def _doctor(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    argv = [sys.executable, "-m", "graphtier.launcher.cli", "doctor", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def report() -> MachineReport:
    done = _doctor("--json")
    assert done.returncode == 0, done.stderr
    return MachineReport.model_validate(json.loads(done.stdout))


def test_json_has_every_check_with_a_status_and_a_reason(report):
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    for check in report.checks:
        assert check.status in ("ok", "unavailable", "failed") and check.reason.strip(), check
    assert report.torch_version == torch.__version__ and report.torch_cuda_version == torch.version.cuda


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device (see test_hardware_gpu.py)")
def test_cpu_machine_says_device_tiers_are_accounted_and_why(report):
    devices = report.check("cuda_devices")
    assert not report.cuda and devices.status == "unavailable"
    assert "device tiers will be accounted, not placed" in report.summary and devices.reason in report.summary
    if torch.version.cuda is None:
        assert f"torch {torch.__version__} is built without CUDA" in devices.reason
    if not report.devices:  # no GPU at all: the summary starts with the plain words
        assert report.summary.startswith("no CUDA device: device tiers will be accounted, not placed (")
        assert "NVML" in devices.reason  # NVML's own error, e.g. the library cannot be loaded
    for name in ("host_register", "peer_access"):
        assert report.check(name).status == "unavailable"


def test_dev_shm_is_the_real_size(report):
    check = report.check("dev_shm")
    st = os.statvfs("/dev/shm")
    assert check.status == "ok"
    assert check.details["total_bytes"] == st.f_blocks * st.f_frsize
    assert abs(check.details["free_bytes"] - st.f_bavail * st.f_frsize) < max(
        2**30, 0.05 * check.details["total_bytes"]
    )


def test_transparent_hugepages_are_what_the_kernel_says(report):
    check = report.check("transparent_hugepages")
    if not (THP / "shmem_enabled").exists():
        assert check.status == "unavailable" and str(THP) in check.reason
        return
    for name in ("enabled", "shmem_enabled"):
        text = (THP / name).read_text()
        selected = text[text.index("[") + 1 : text.index("]")]
        assert check.details[name] == selected and f"{name}={selected}" in check.reason
    huge = check.details["shmem_enabled"] in ("always", "within_size", "advise", "force")
    assert check.status == ("ok" if huge else "unavailable")


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_table_fits_80_columns_and_names_every_check(report):
    done = _doctor(columns=80)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, "\n".join(lines)
    for name in CHECK_NAMES:
        assert name in done.stdout
    assert report.summary.split(":")[0] in done.stdout


def test_usage_error_exits_2():
    done = _doctor("--no-such-flag")
    assert done.returncode == 2 and "No such option" in done.stderr
