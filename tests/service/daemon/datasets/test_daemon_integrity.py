"""graphtierd refuses to load a dataset whose files changed since `prepare`, naming the file."""

from __future__ import annotations

import os
import shutil

import pytest

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonRequestError
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.prepared.npy_io import npy_data_offset


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_daemon_refuses_a_corrupt_dataset_naming_the_file(tmp_path, small_rmat, daemon_processes):
    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    features = root / "rmat12" / "features.npy"
    offset = npy_data_offset(features)
    with open(features, "r+b") as f:  # same size, one byte changed: only the checksum can tell
        f.seek(offset + 1000)
        byte = f.read(1)
        f.seek(offset + 1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    endpoints = daemon_processes(root).start()
    with DataPlaneClient(endpoints.grpc_target) as client:
        with pytest.raises(DaemonRequestError) as info:
            client.load_dataset("rmat12", BudgetSpec())
        assert client.list_datasets() == []
    assert info.value.code == "FAILED_PRECONDITION"
    assert f"{features}: checksum mismatch for 'features'" in str(info.value)
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"graphtier.{endpoints.pid}.")]  # nothing half-loaded
