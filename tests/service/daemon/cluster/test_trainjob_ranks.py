"""Ranks a Kubeflow TrainJob would start: torchrun configured only by PET_* variables, on two
"nodes", each rank told nothing but the job spec and where its node's daemon is. Each attaches to
its node's daemon (AttachJob), which runs that node's producers; the ranks train together over
gloo as torchrun set them up, and each daemon's part ends when its ranks are done."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from cluster_nodes import free_port

from graphtier.contract.jobs.state import JobState

pytestmark = pytest.mark.slow  # two daemons and two torchruns: about 45 s on this 2-core machine

SPEC = "dataset: rmat12\nmodel: sage\nfanouts: [5, 5]\nbatch_size: 128\nhidden: 32\nepochs: 2\nname: trainjob\n"


def test_pet_only_ranks_on_two_nodes_attach_to_their_daemons_and_train(test_cluster, small_rmat, tmp_path):
    nodes = [test_cluster.add([small_rmat.directory]) for _ in range(2)]
    test_cluster.start()
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    master_port = free_port("127.0.0.1")
    launched = []
    for node_rank, node in enumerate(nodes):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHTIER_", "PET_"))}
        env.update(
            PET_NNODES="2",
            PET_NPROC_PER_NODE="1",
            PET_NODE_RANK=str(node_rank),
            PET_MASTER_ADDR="127.0.0.1",
            PET_MASTER_PORT=str(master_port),
            GRAPHTIER_RUNTIME_DIR=str(node.runtime_dir),
            GRAPHTIER_SHM_NAMESPACE=os.environ["GRAPHTIER_SHM_NAMESPACE"],
        )
        log = open(tmp_path / f"torchrun-{node_rank}.log", "wb")
        launched.append(
            (
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "torch.distributed.run",
                        "--log-dir",
                        str(tmp_path / f"te{node_rank}"),
                        "-m",
                        "graphtier.launcher.rank_main",
                        "--spec",
                        str(spec),
                    ],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=tmp_path,
                ),
                log,
            )
        )
    for popen, log in launched:
        code = popen.wait(240)
        log.close()
        assert code == 0, (tmp_path / log.name).read_text()[-3000:]
    ranks = []
    for node in nodes:
        with node.client() as client:
            deadline = time.monotonic() + 30
            while not (jobs := client.list_jobs()) or not jobs[0].state.final:
                assert time.monotonic() < deadline, f"the part on {node.address} did not end"
                time.sleep(0.2)
        (job,) = jobs
        assert job.state == JobState.SUCCEEDED, job.message
        assert job.spec.nnodes == 2 and job.spec.nproc_per_node == 1 and job.spec.name == "trainjob"
        assert job.progress is not None and job.progress.global_step == job.progress.total_steps > 0
        ranks += [r.rank for r in job.ranks]
    assert sorted(ranks) == [0, 1]  # one global rank per node, as torchrun's static rendezvous gave them
