"""The file-system checks against real files: a FIFO for MPS, statvfs of real directories, the THP format."""

from __future__ import annotations

import os

from graphtier.service.hardware.host import check_dev_shm, check_mps, check_transparent_hugepages


def test_mps_control_pipe_found_missing_or_wrong(tmp_path):
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(tmp_path), "PATH": str(tmp_path)}
    missing = check_mps(env)
    assert missing.status == "unavailable"
    assert f"{tmp_path / 'control'} does not exist" in missing.reason and "not on PATH" in missing.reason

    os.mkfifo(tmp_path / "control")
    client = tmp_path / "nvidia-cuda-mps-control"
    client.write_text("#!/bin/sh\n")
    client.chmod(0o755)
    found = check_mps(env)
    assert found.status == "ok" and str(client) in found.reason
    assert found.details["pipe_directory"] == str(tmp_path)

    (tmp_path / "control").unlink()
    (tmp_path / "control").write_text("not a pipe")
    wrong = check_mps(env)
    assert wrong.status == "failed" and "is not a pipe or socket" in wrong.reason


def test_mps_default_pipe_directory():
    check = check_mps({"PATH": ""})
    assert check.details["pipe_directory"] == "/tmp/nvidia-mps"


def test_dev_shm_reads_statvfs(tmp_path):
    check = check_dev_shm(tmp_path)
    st = os.statvfs(tmp_path)
    assert check.status == "ok" and check.details["total_bytes"] == st.f_blocks * st.f_frsize
    gone = check_dev_shm(tmp_path / "absent")
    assert gone.status == "unavailable" and "does not exist" in gone.reason


def test_transparent_hugepages_reads_the_bracketed_choice(tmp_path):
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    (tmp_path / "shmem_enabled").write_text("always within_size advise [never] deny force\n")
    off = check_transparent_hugepages(tmp_path)
    assert off.status == "unavailable" and off.details == {"enabled": "madvise", "shmem_enabled": "never"}
    assert "set shmem_enabled to advise" in off.reason

    (tmp_path / "shmem_enabled").write_text("always within_size [advise] never deny force\n")
    assert check_transparent_hugepages(tmp_path).status == "ok"

    (tmp_path / "enabled").unlink()
    missing = check_transparent_hugepages(tmp_path)
    assert missing.status == "unavailable" and str(tmp_path / "enabled") in missing.reason
