"""Ranks a Kubeflow TrainJob would start: torchrun configured only by PET_* variables, on two
"nodes", each rank told nothing but the job spec and where its node's daemon is. Each attaches to
its node's daemon (AttachJob), which runs that node's producers; the ranks train together over
gloo as torchrun set them up, and each daemon's part ends when its ranks are done. The same for a
user's own script calling `graphtier.connect()` under torchrun's own multi-node launch (c10d)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


OWN_SCRIPT = """\
import graphtier

with graphtier.connect(dataset="rmat12", fanout="5,5", batch_size=128, hidden=32, epochs=2, name="own") as job:
    result = job.fit()
    print(f"rank {job.rank} of {job.world_size}: test accuracy {result.final_eval['test']:.3f}", flush=True)
"""


def test_a_connect_script_under_torchruns_own_two_node_launch_attaches_each_rank_to_its_daemon(
    test_cluster, small_rmat, tmp_path
):
    nodes = [test_cluster.add([small_rmat.directory]) for _ in range(2)]
    test_cluster.start()
    script = tmp_path / "train.py"
    script.write_text(OWN_SCRIPT)
    endpoint = f"{nodes[0].host}:{free_port(nodes[0].host)}"
    launched = []
    for node_rank, node in enumerate(nodes):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHTIER_", "PET_", "TORCHELASTIC_"))}
        env.update(
            GRAPHTIER_RUNTIME_DIR=str(node.runtime_dir),  # each node's ranks find their own node's daemon
            GRAPHTIER_SHM_NAMESPACE=os.environ["GRAPHTIER_SHM_NAMESPACE"],
            OMP_NUM_THREADS="1",
        )
        argv = [
            sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "own-launch",
            "--rdzv-conf", f"is_host={str(node_rank == 0).lower()}", "--local-addr", node.host,
            "--log-dir", str(tmp_path / f"te{node_rank}"), str(script),
        ]  # fmt: skip
        log = open(tmp_path / f"own-{node_rank}.log", "wb")
        launched.append((subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path), log))
    output = ""
    for popen, log in launched:
        code = popen.wait(240)
        log.close()
        output += (tmp_path / Path(log.name).name).read_text()
        assert code == 0, output[-3000:]
    assert sorted(line.split(":")[0] for line in output.splitlines() if " of 2: test accuracy " in line) == [
        "rank 0 of 2",
        "rank 1 of 2",
    ], output[-3000:]
    ranks = []
    for node in nodes:
        with node.client() as client:
            deadline = time.monotonic() + 30
            while not (jobs := client.list_jobs()) or not jobs[0].state.final:
                assert time.monotonic() < deadline, f"the part on {node.address} did not end"
                time.sleep(0.2)
        (job,) = jobs  # one job per node: the node's ranks made it and joined it
        assert job.state == JobState.SUCCEEDED, job.message
        assert job.spec.nnodes == 2 and job.spec.nproc_per_node == 1 and job.spec.name == "own"
        assert job.progress is not None and job.progress.global_step == job.progress.total_steps > 0
        if [r.rank for r in job.ranks] == [0]:  # rank 0 reports the job's result, to its node's daemon
            assert job.result is not None and job.result.test_accuracy > 0
        ranks += [r.rank for r in job.ranks]
    assert sorted(ranks) == [0, 1]  # each node's daemon served the global rank the c10d rendezvous gave it
