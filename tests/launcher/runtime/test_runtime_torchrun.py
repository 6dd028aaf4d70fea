"""Real torchrun, two ranks, gloo: data-parallel training shards the train ids, keeps the
replicas identical, and a killed rank is recovered from the last checkpoint (--max-restarts)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("ddp_train_script.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(small_rmat, out: Path, epochs: int, ckpt_every: int, *, max_restarts: int = 0, env: dict | None = None):
    # torchrun of this interpreter (a `torchrun` on PATH may belong to another environment)
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    cmd += [
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "--max-restarts",
        str(max_restarts),
        "--monitor-interval",
        "0.2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{_free_port()}",
        "--rdzv-id",
        out.name,
        "--log-dir",
        str(out / "torchelastic"),  # not a /tmp/torchelastic_* left behind per run
        str(SCRIPT),
        str(small_rmat.directory.parent),
        small_rmat.name,
        str(out),
        str(epochs),
        str(ckpt_every),
    ]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"torchrun failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    records = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    states = [torch.load(out / f"rank{r}.pt", weights_only=True) for r in range(2)]
    return records, states, done


def _assert_identical(states) -> None:
    assert states[0].keys() == states[1].keys()
    for key in states[0]:
        assert torch.equal(states[0][key], states[1][key]), f"replicas differ in {key}"


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_two_ranks_train_disjoint_shards_into_identical_replicas(small_rmat, tmp_path):
    out = tmp_path / "ddp"
    out.mkdir()
    records, states, _ = _torchrun(small_rmat, out, epochs=2, ckpt_every=0)
    train = set(small_rmat.split("train").tolist())
    shards = [set(r["seen"]["0"]) for r in records]
    assert shards[0] and shards[1]
    # The epoch plan drops T mod 2 ids of the epoch's permutation; the shards are disjoint.
    assert not shards[0] & shards[1] and len(train - (shards[0] | shards[1])) == len(train) % 2
    assert records[0]["steps"] == records[1]["steps"] == 2 * records[0]["batches_per_epoch"]
    _assert_identical(states)
    # They really trained: the parameters moved away from the shared initialisation.
    torch.manual_seed(5)
    from graphtier.launcher.runtime import build_model

    init = build_model(
        "sage", small_rmat.manifest.feature_dim, 32, small_rmat.manifest.num_classes, 2, 0.2
    ).state_dict()
    assert any(not torch.equal(init[k], states[0][k]) for k in init)
    assert records[0]["final_eval"] == records[1]["final_eval"] and 0.0 < records[0]["final_eval"]["test"] <= 1.0


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_killed_rank_resumes_from_the_last_checkpoint(small_rmat, tmp_path):
    out = tmp_path / "restart"
    out.mkdir()
    # Rank 1 dies about to train batch 4 of epoch 1: steps 7 (epoch 0) + 4 were done, so rank 0 had
    # certainly written the step-9 checkpoint (epoch 1, 2 batches in) and could not reach step 12.
    # Rank 1 reads an empty checkpoint directory of its own, as a rank on a node whose part is new after
    # a multi-node restart: the ranks agree on the newest checkpoint any holds, and rank 0 sends it.
    records, states, done = _torchrun(
        small_rmat,
        out,
        epochs=3,
        ckpt_every=3,
        max_restarts=1,
        env={"GRAPHTIER_TEST_DIE_AT": "1:4", "GRAPHTIER_TEST_OWN_CHECKPOINTS": "1"},
    )
    per_epoch = records[0]["batches_per_epoch"]
    assert per_epoch == 7
    for r in records:
        assert r["attempt"] == 1, "the ranks that finished must be the restarted ones"
        assert (r["resumed_epoch"], r["resumed_batch"], r["resumed_step"]) == (1, 2, 9)
        assert r["steps"] == 3 * per_epoch
    _assert_identical(states)
    ckpts = sorted(p.name for p in (out / "ckpt").iterdir())
    assert ckpts == [f"ckpt-{18:09d}.pt", f"ckpt-{21:09d}.pt"], ckpts
    assert not (out / "ckpt-rank1").exists()  # rank 1 (local rank 1) never writes one


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_ranks_with_uneven_batch_counts_neither_hang_nor_diverge(small_rmat, tmp_path):
    out = tmp_path / "uneven"
    out.mkdir()
    records, states, _ = _torchrun(small_rmat, out, epochs=1, ckpt_every=0, env={"GRAPHTIER_TEST_UNEVEN": "1"})
    assert (records[0]["steps"], records[1]["steps"]) == (7, 6)
    _assert_identical(states)  # DDP's join shadows the missing all-reduces and syncs the final model
