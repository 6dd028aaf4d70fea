"""Learned node embeddings in shared memory under real torchrun (2 ranks, gloo): one table per
machine that both ranks read and write, updated exactly as one process would, restored from a
checkpoint, the tables of two machines kept identical, and nothing left after a kill."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from shared_embeddings_script import NUM_NODES, SEED, STEPS, WIDTH, step_rows
from test_runtime_torchrun import _free_port

from graphtier.launcher.runtime.link_model import NodeEmbeddings

SCRIPT = Path(__file__).with_name("shared_embeddings_script.py")


def _run_until_reported(out: Path) -> list[dict]:
    """torchrun the script, wait for both ranks' records, then SIGKILL the whole group."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}", "--rdzv-id", out.name,
           "--log-dir", str(out / "torchelastic"), str(SCRIPT), str(out)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    torchrun = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not all((out / f"rank{r}.json").exists() for r in range(2)):
            assert torchrun.poll() is None, f"torchrun ended ({torchrun.returncode}):\n{torchrun.stdout.read()[-4000:]}"
            assert time.monotonic() < deadline, "the ranks did not report within 180 s"
            time.sleep(0.2)
        time.sleep(0.5)  # both files complete
    finally:  # torchrun starts each rank in a session of its own: kill every process of the tree
        tree = [torchrun.pid, *(p.pid for p in psutil.Process(torchrun.pid).children(recursive=True))]
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        torchrun.wait()
        for pid in tree[1:]:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).wait(30)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_two_ranks_share_one_table_updated_as_one_process_would(tmp_path):
    records = _run_until_reported(tmp_path)
    assert all(r["shared"] and r["restored"] for r in records)  # a checkpoint restores into the shared table
    assert records[1]["row7"] == [42.0] * WIDTH  # written by rank 0 only, read by rank 1: one table

    states = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(2)]
    reference = NodeEmbeddings(NUM_NODES, WIDTH, lr=0.1, seed=SEED)  # one process, every rank's gradients
    reference.weight[7] = 42.0
    for step in range(STEPS):
        ids, grads = zip(*(step_rows(step, rank) for rank in range(2)), strict=True)
        touched = reference.apply_gradients(torch.cat(ids), torch.cat(grads) / 2)  # ranks average
        # the machine's two ranks split the touched rows between them, each updating its share
        assert records[0]["updated"][step] + records[1]["updated"][step] == touched
        assert min(records[0]["updated"][step], records[1]["updated"][step]) > 0
    machines = [torch.load(tmp_path / f"rank{r}-machine.pt", weights_only=True) for r in range(2)]
    for state in [*states, *machines]:  # one machine's table, and each of two machines' tables, alike
        for name in ("weight", "exp_avg", "exp_avg_sq"):
            assert torch.allclose(state[name], getattr(reference, name), atol=1e-6), name
        assert torch.equal(state["steps"], reference.steps)
    assert records[1]["machine_row7"] != [42.0] * WIDTH  # two machines: rank 0's write stayed on its own
    # killed mid-job: the autouse check finds no segment of this run left in /dev/shm
