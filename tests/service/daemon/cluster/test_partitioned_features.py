"""Partitioned features on real daemons ("nodes" on 127.0.0.1-2, TLS + token), real torchrun and real
producers: every node holds the hottest rows and its own share, fetches the others' rows per batch
from their daemons (FetchRows) and accounts them as the `network` tier; the batches are bit-identical
to the replicated run's; FetchRows refuses strangers, rows a node does not own and unknown partitions."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import torch
from cluster_nodes import final_job, wait_for

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.contract.partition import MAX_FETCH_ROWS, FeaturePartition, replicated_rows
from graphtier.v1 import features_pb2, features_pb2_grpc

# Each batch's node ids and a digest of its feature rows, one JSON line per batch, per rank; with
# a file named `hold` beside the output, the rank waits (up to 90 s) for it to go before training.
RECORDER = """
import hashlib, json, os, sys, time
from pathlib import Path
from graphtier.launcher import loader
out = Path(sys.argv[1])
with loader.connect() as job:
    deadline = time.monotonic() + 90
    while (out / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    with open(out / f"rank{job.rank}.jsonl", "w") as f:
        for epoch in job.epochs():
            for batch in job.batches(epoch):
                ids = batch.node_ids
                x = batch.x.contiguous()
                f.write(json.dumps({"epoch": epoch, "ids": ids.tolist(),
                                    "x": hashlib.sha256(x.numpy().tobytes()).hexdigest()}) + "\\n")
                job.step(0.0)
"""


def _records(directory: Path) -> dict[int, list[dict]]:
    return {
        int(p.stem[4:]): [json.loads(line) for line in p.read_text().splitlines()]
        for p in sorted(directory.glob("rank*.jsonl"))
    }


def _status(node) -> dict:
    with node.client() as client:
        url = client.endpoints.http_url
    with urllib.request.urlopen(f"{url}/v1/status", timeout=10) as reply:
        return json.loads(reply.read())


def _spec(script: Path, out: Path, **extra) -> JobSpec:
    return JobSpec(
        dataset="rmat12",
        fanouts=[5, 5],
        batch_size=128,
        epochs=1,
        nnodes=2,
        seed=7,
        script=str(script),
        args=[str(out)],
        **extra,
    )


def _two_nodes(test_cluster, small_rmat, tmp_path):
    a, b = test_cluster.add([small_rmat.directory]), test_cluster.add([small_rmat.directory])
    test_cluster.start()
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    return a, b, script


def _stub(node, token: str | None, cert: Path):
    creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    channel = grpc.secure_channel(node.address, creds)
    metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
    return channel, features_pb2_grpc.FeatureServiceStub(channel), metadata


@pytest.mark.slow
def test_partitioned_batches_equal_the_replicated_ones_and_only_cold_remote_rows_cross(
    test_cluster, small_rmat, tmp_path
):
    a, b, script = _two_nodes(test_cluster, small_rmat, tmp_path)
    runs = {}
    for features in ("replicated", "partitioned"):
        out = tmp_path / features
        out.mkdir()
        extra = {"features": features, "replicate": 0.1} if features == "partitioned" else {}
        with a.client() as client:
            job = client.submit_job(_spec(script, out, **extra))
            final = final_job(client, job.job_id)
        assert final.state == JobState.SUCCEEDED, final.message
        runs[features] = (final, _records(out))
    (replicated, seen), (partitioned, fetched) = runs["replicated"], runs["partitioned"]
    assert sorted(seen) == sorted(fetched) == [0, 1] and all(seen[r] for r in seen)
    for rank in seen:  # the same batches, bit for bit
        assert [(r["ids"], r["x"]) for r in fetched[rank]] == [(r["ids"], r["x"]) for r in seen[rank]]
    assert replicated.progress.traffic.network.rows == 0

    # what crossed: exactly the rows each rank's node does not hold, none of them a replicated row
    row_bytes = 16 * 4
    num_rows = small_rmat.manifest.num_nodes
    r = replicated_rows(num_rows, "10%", row_bytes)
    addresses = partitioned.placement.node_addresses
    node_of_rank = {rank.rank: n.node_rank for n in partitioned.nodes for rank in n.ranks}
    expected = dict.fromkeys(addresses, 0)
    for rank, batches in fetched.items():
        me = FeaturePartition(num_rows=num_rows, replicated_rows=r, nnodes=2, node_rank=node_of_rank[rank])
        for record in batches:
            ids = np.asarray(record["ids"])
            remote = ids[~me.is_local(ids)]
            assert (remote >= r).all()
            expected[addresses[1 - me.node_rank]] += remote.size
    network = partitioned.progress.traffic.network
    assert network.rows == sum(expected.values()) > 0 and network.bytes == network.rows * row_bytes
    total = partitioned.progress.traffic.total_rows
    assert total == replicated.progress.traffic.total_rows  # every row gathered once, from somewhere
    for node in (a, b):  # each node's /v1/status names the peer its producer fetched from, rows and bytes
        job = next(j for j in _status(node)["jobs"] if j["network"]["rows"])
        (peer,) = job["network"]["peers"]
        assert peer["peer"] != node.address and peer["rows"] == expected[peer["peer"]]
        assert peer["bytes"] == peer["rows"] * row_bytes and peer["requests"] >= len(fetched[0])
        assert job["traffic"]["sources"]["network"]["bytes"] == peer["bytes"]
    with a.client() as client:
        url = client.endpoints.http_url
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as reply:
        metrics = reply.read().decode()
    assert 'graphtier_network_peer_bytes_total{job_id="' in metrics and 'tier="network"' in metrics
    shown = subprocess.run(
        [sys.executable, "-m", "graphtier.launcher.cli", "metrics", "--runtime-dir", str(a.runtime_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "network tier by peer" in shown.stdout and b.address in shown.stdout  # the tables are the report
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "job",
            "status",
            partitioned.job_id,
            "--runtime-dir",
            str(a.runtime_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())  # the report, whole or wrapped
    assert "features partitioned (10% on every node)" in text and f"network tier: {network.rows:,} rows" in text


def _segments(pid: int) -> dict[str, int]:
    """The shared-memory segments daemon `pid` owns: label -> bytes."""
    from graphtier.service.shm.naming import SegmentName

    found = {}
    for name in os.listdir("/dev/shm"):
        segment = SegmentName.parse(name)
        if segment is not None and segment.pid == pid:
            found[segment.label] = os.stat(f"/dev/shm/{name}").st_size
    return found


@pytest.mark.parametrize(("num_rows", "replicated", "nnodes"), [(1000, 100, 2), (1001, 0, 3), (7, 7, 2), (5, 1, 4)])
def test_every_row_is_replicated_or_owned_by_exactly_one_node(num_rows, replicated, nnodes):
    ids = np.arange(num_rows)
    parts = [
        FeaturePartition(num_rows=num_rows, replicated_rows=replicated, nnodes=nnodes, node_rank=k)
        for k in range(nnodes)
    ]
    holders = sum(p.is_local(ids).astype(int) for p in parts)
    assert (holders[:replicated] == nnodes).all() and (holders[replicated:] == 1).all()
    assert sum(p.owned_rows() for p in parts) == num_rows - replicated
    for p in parts:  # a node's copy: the replicated rows, then its own, each in its own place
        local = ids[p.is_local(ids)]
        assert np.array_equal(p.local_index(local), np.arange(p.local_rows))
        assert np.array_equal(local[replicated:], p.owned_ids())


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"features": "partitioned"}, "needs nnodes >= 2"),
        ({"features": "partitioned", "nnodes": 17}, "at most 16 nodes"),
        ({"features": "sharded", "nnodes": 2}, "'replicated' or 'partitioned'"),
        ({"features": "partitioned", "nnodes": 2, "replicate": "lots"}, "neither a share of the rows"),
        ({"features": "partitioned", "nnodes": 2, "replicate": "150%"}, "more than 100% of the rows"),
        ({"features": "partitioned", "nnodes": 2, "replicate": 2}, "a size needs a unit"),
        ({"features": "partitioned", "nnodes": 2, "replicate": "5parsecs"}, "unknown unit 'parsecs'"),
        ({"replicate": 0.3, "nnodes": 2}, "applies to features 'partitioned' only"),
    ],
)
def test_bad_feature_specs_are_refused_naming_why(values, problem):
    from graphtier.contract.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match=re.escape(problem)):
        JobSpec.build({"dataset": "rmat12", **values}, source="command line")

    def budget(value):
        return JobSpec.build({"dataset": "d", "features": "partitioned", "nnodes": 2, "replicate": value}).replicate

    assert (budget(0.05), budget("0.05"), budget("5%"), budget(" 512MiB ")) == ("5%", "5%", "5%", "512MiB")
    assert replicated_rows(1000, "5%", 64) == 50 and replicated_rows(1000, "6400B", 64) == 100
    assert replicated_rows(1000, "1GiB", 64) == 1000 and replicated_rows(1000, "0", 64) == 0


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_fetch_rows_serves_owned_rows_only_and_refuses_strangers(test_cluster, small_rmat, tmp_path):
    a, b, script = _two_nodes(test_cluster, small_rmat, tmp_path)
    out = tmp_path / "held"
    out.mkdir()
    (out / "hold").write_text("")  # the ranks wait: the partitions stay held while we ask
    with a.client() as client:
        job = client.submit_job(_spec(script, out, features="partitioned", replicate="64KiB"))  # a size: 1024 rows
        info = wait_for(
            lambda: (lambda j: j if j.placement and j.nodes else None)(client.get_job(job.job_id)),
            60,
            "the job's placement",
        )
    try:
        version, addresses = info.placement.dataset_version, info.placement.node_addresses
        owner_rank = addresses.index(b.address)
        num_rows = small_rmat.manifest.num_nodes
        r = replicated_rows(num_rows, "64KiB", 64)
        assert r == 1024
        part = FeaturePartition(num_rows=num_rows, replicated_rows=r, nnodes=2, node_rank=owner_rank)
        own = part.owned_ids()[:5]
        token = test_cluster.token.read_text().strip()

        def ask(rows, *, token=token, **fields):
            channel, stub, metadata = _stub(b, token, test_cluster.cert)
            request = features_pb2.FetchRowsRequest(
                **{
                    "dataset": "rmat12",
                    "version": version,
                    "nnodes": 2,
                    "owner_rank": owner_rank,
                    "replicated_rows": r,
                    "rows": [int(x) for x in rows],
                    **fields,
                }
            )
            try:
                return stub.FetchRows(request, metadata=metadata, timeout=20)
            finally:
                channel.close()

        # node b holds its rows of the job, and no copy of the whole feature matrix
        held = _segments(b.process.pid)
        (copy,) = [size for label, size in held.items() if f"part{owner_rank}of2" in label]
        assert copy == part.local_rows * 64 < num_rows * 64
        assert not any(size >= num_rows * 64 for label, size in held.items() if "part" not in label and "feat" in label)

        reply = ask(own)  # the owner's rows, in the order asked, as prepared
        features = small_rmat.features
        assert reply.row_bytes == 64
        assert reply.data == features[own].contiguous().numpy().tobytes()
        assert ask(own[::-1]).data == features[own[::-1].copy()].contiguous().numpy().tobytes()
        refusals = [
            (dict(rows=[0]), grpc.StatusCode.INVALID_ARGUMENT, "replicated on every node"),
            (dict(rows=[int(own[0]) + 1]), grpc.StatusCode.INVALID_ARGUMENT, "owned by node"),
            (dict(rows=[num_rows]), grpc.StatusCode.INVALID_ARGUMENT, "out of range"),
            (dict(rows=own, version="0" * 64), grpc.StatusCode.NOT_FOUND, "holds no partition"),
            (dict(rows=own, dataset="nope"), grpc.StatusCode.NOT_FOUND, "holds no partition"),
            (dict(rows=own, token="f" * 64), grpc.StatusCode.UNAUTHENTICATED, ""),
            (dict(rows=own, token=None), grpc.StatusCode.UNAUTHENTICATED, ""),
            (dict(rows=np.repeat(own[:1], MAX_FETCH_ROWS + 1)), grpc.StatusCode.RESOURCE_EXHAUSTED, "reply limit"),
        ]
        for fields, code, text in refusals:
            rows = fields.pop("rows")
            with pytest.raises(grpc.RpcError) as caught:
                ask(rows, **fields)
            assert caught.value.code() == code and text in (caught.value.details() or ""), (fields, caught.value)
        # plaintext to the TLS listener is refused too
        with grpc.insecure_channel(b.address) as channel:
            with pytest.raises(grpc.RpcError) as caught:
                features_pb2_grpc.FeatureServiceStub(channel).FetchRows(
                    features_pb2.FetchRowsRequest(dataset="rmat12", rows=[int(own[0])]),
                    timeout=10,
                    metadata=(("authorization", f"Bearer {token}"),),
                )
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        with a.client() as client:
            client.cancel_job(job.job_id, "test done")
            final_job(client, job.job_id)


def test_hetero_rows_are_partitioned_per_node_type(prepared_acm):
    """A heterogeneous dataset's partition copies: one per featured node type, of its type-local rows, served by
    naming the type; a type without features, or no type at all, is refused naming why."""
    from graphtier.contract.errors import DaemonError, UnknownDatasetError
    from graphtier.service.daemon.datasets.partitions import PartitionCopies, PartitionKey
    from graphtier.service.prepared.digests import dataset_version

    root, version = prepared_acm.directory.parent, dataset_version(prepared_acm.directory)
    papers = prepared_acm.array(prepared_acm.manifest.hetero.type_named("paper").feature_array)
    copies = PartitionCopies(root)
    try:
        copy = copies.acquire("j1", "acm", version, nnodes=2, node_rank=1, replicate="10%", node_type="paper")
        part = copy.partition
        assert (part.num_rows, part.replicated_rows) == (papers.shape[0], papers.shape[0] // 10)
        assert copy.key.node_type == "paper" and copy.row_bytes == papers.shape[1] * 4
        own = part.owned_ids()[:3]
        row_bytes, data = copies.fetch(copy.key, own)
        assert row_bytes == copy.row_bytes and data == papers[torch.from_numpy(own)].contiguous().numpy().tobytes()
        homogeneous = PartitionKey("acm", version, 2, 1, part.replicated_rows)
        with pytest.raises(UnknownDatasetError, match="holds no partition acm@"):
            copies.fetch(homogeneous, own)
        for node_type, problem in (
            ("author", r"no feature rows of node type 'author' to partition \(featured types: paper\)"),
            ("", "is heterogeneous: its rows are partitioned per node type"),
        ):
            with pytest.raises(DaemonError, match=problem):
                copies.acquire("j1", "acm", version, nnodes=2, node_rank=1, replicate="10%", node_type=node_type)
        # a part whose second type cannot be partitioned keeps none of the copies made for it
        from graphtier.contract.jobs.spec import JobSpec
        from graphtier.contract.jobs.view import JobPlacementInfo
        from graphtier.service.daemon.datasets.partitions import FetchAccess

        spec = JobSpec(dataset="acm", fanouts=[5], nnodes=2, features="partitioned")
        placement = JobPlacementInfo(
            nnodes=2,
            node_rank=1,
            rdzv_endpoint="127.0.0.1:1",
            rdzv_id="r",
            coordinator="127.0.0.1:1",
            coordinator_job_id="1",
            local_addr="127.0.0.1",
            dataset_version=version,
            node_addresses=["127.0.0.1:1", "127.0.0.1:2"],
        )
        access = FetchAccess(token_file=root / "token", ca_file=None)
        with pytest.raises(DaemonError, match="node type 'author'"):
            copies.for_part("j2", spec, placement, access, ["paper", "author"])
    finally:
        copies.release("j1")
    assert copies.held() == []  # j2's paper copy too
