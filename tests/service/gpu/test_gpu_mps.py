"""`--mps manage` on a GPU machine with NVIDIA's MPS tools: the daemon's own control daemon, in its
runtime directory, serves processes that connect with a job's producer and rank environments,
and is gone after the last job.

Run alone, in a fresh process (`python -m pytest tests/service/gpu/test_gpu_mps.py`, as
tests/bench/gpu_check.sh does): an MPS server may not start, and its clients may hang, beside a
non-MPS CUDA context that earlier tests of the same process keep open on the GPU until it exits.
Where this process already holds one, the test skips and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from gpu_marks import needs_cuda

from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.daemon.jobs.mps import LOG_ENV, MPS_CONTROL, PIPE_ENV, MpsControl

pytestmark = [
    needs_cuda,
    pytest.mark.skipif(shutil.which(MPS_CONTROL) is None, reason=f"{MPS_CONTROL} is not on PATH"),
]

CLIENT = """
import torch
x = torch.ones(1 << 20, device="cuda")
torch.cuda.synchronize()
print(float(x.sum()))
"""


def _cuda_context_here() -> str:
    """Why this process may hold a CUDA context already ("" when it holds none)."""
    import torch

    from graphtier.service.gpu import runtime

    if torch.cuda.is_initialized():
        return "torch initialised CUDA"
    if runtime._state:
        return "graphtier's CUDA runtime binding was used"
    return ""


def test_a_managed_control_daemon_serves_a_producer_at_its_share_and_stops_after_the_job(tmp_path):
    if why := _cuda_context_here():
        pytest.skip(f"{why} in this process: run this test alone, in a fresh one (see the module docstring)")
    mps = MpsControl(tmp_path / "run")
    share = mps.decide(JobSpec(dataset="d", device="cuda", mps="manage", producer_sm_share=20))
    mps.acquire("1", share)
    try:
        assert mps.running and share.producer_env()[PIPE_ENV] == str(tmp_path / "run" / "mps" / "pipe")
        for env in (share.producer_env(), share.rank_env()):  # a producer at its share, a rank unlimited
            child = subprocess.run(
                [sys.executable, "-c", CLIENT], env={**os.environ, **env}, capture_output=True, text=True, timeout=120
            )
            assert child.returncode == 0 and child.stdout.strip() == str(float(1 << 20)), child.stderr
        servers = subprocess.run(
            [MPS_CONTROL],
            input="get_server_list\n",
            env={**os.environ, PIPE_ENV: str(mps.pipe_directory), LOG_ENV: str(mps.log_directory)},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert servers.stdout.split(), "no MPS server ran for the client: it did not connect through MPS"
    finally:
        mps.release("1")
    assert not mps.running and not (tmp_path / "run" / "mps").exists()
