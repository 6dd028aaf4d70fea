"""`graphtier dataset push NAME --to NODE`: a prepared dataset streamed to a peer daemon in chunks,
checked by sha256 and moved into place only when whole; a cut stream or a corrupt chunk leaves
nothing behind on the receiver."""

from __future__ import annotations

import hashlib
import json
import time

import grpc
import pytest
from typer.testing import CliRunner

from graphtier.launcher.cli.app import app
from graphtier.service.prepared.digests import dataset_version
from graphtier.v1 import cluster_pb2, cluster_pb2_grpc


def _cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _entries(node) -> list[str]:
    return sorted(p.name for p in node.dataset_root.iterdir())


def _version(node, name: str) -> str:
    return dataset_version(node.dataset_root / name)


def _stub(test_cluster, node):
    credentials = grpc.ssl_channel_credentials(root_certificates=test_cluster.cert.read_bytes())
    channel = grpc.secure_channel(node.address, credentials)
    metadata = (("authorization", f"Bearer {test_cluster.token.read_text().strip()}"),)
    return channel, cluster_pb2_grpc.ClusterServiceStub(channel), metadata


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_push_copies_a_dataset_exactly_and_refuses_to_overwrite_another_version(test_cluster, small_rmat):
    a, b = test_cluster.add([small_rmat.directory]), test_cluster.add()
    test_cluster.start()
    pushed = _cli("dataset", "push", "rmat12", "--to", b.address, "--runtime-dir", a.runtime_dir, "--json")
    assert pushed.exit_code == 0, pushed.output
    result = json.loads(pushed.stdout)
    assert result["version"] == _version(a, "rmat12") == _version(b, "rmat12") and result["bytes"] > 0
    for file in (a.dataset_root / "rmat12").iterdir():
        assert (b.dataset_root / "rmat12" / file.name).read_bytes() == file.read_bytes()
    assert _entries(b) == ["rmat12"]  # no temporary left
    again = json.loads(
        _cli("dataset", "push", "rmat12", "--to", b.address, "--runtime-dir", a.runtime_dir, "--json").stdout
    )
    assert again["unchanged"] and again["bytes"] == 0

    manifest = a.dataset_root / "rmat12" / "manifest.json"  # another version on the sender
    changed = json.loads(manifest.read_text())
    changed["score"] = {**changed["score"], "damping": 0.5}  # prepared again with another damping
    manifest.write_text(json.dumps(changed))
    refused = _cli("dataset", "push", "rmat12", "--to", b.address, "--runtime-dir", a.runtime_dir)
    assert refused.exit_code == 1 and "already has dataset 'rmat12' at another version" in refused.output
    assert "--replace" in refused.output
    replaced = _cli("dataset", "push", "rmat12", "--to", b.address, "--replace", "--runtime-dir", a.runtime_dir)
    assert replaced.exit_code == 0, replaced.output
    assert _version(b, "rmat12") == _version(a, "rmat12") and _entries(b) == ["rmat12"]

    unknown = _cli("dataset", "push", "rmat12", "--to", "nowhere", "--runtime-dir", a.runtime_dir)
    assert unknown.exit_code == 2 and "node 'nowhere' is not in this daemon's cluster" in unknown.output


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_cut_or_corrupt_stream_leaves_nothing_on_the_receiver(test_cluster, small_rmat):
    b = test_cluster.add()
    test_cluster.start()
    directory = small_rmat.directory
    manifest = json.loads((directory / "manifest.json").read_text())
    files = [
        cluster_pb2.DatasetFile(name=i["file"], size_bytes=(directory / i["file"]).stat().st_size, sha256=i["sha256"])
        for i in manifest["arrays"].values()
    ]
    files.append(
        cluster_pb2.DatasetFile(
            name="manifest.json",
            size_bytes=(directory / "manifest.json").stat().st_size,
            sha256=hashlib.sha256((directory / "manifest.json").read_bytes()).hexdigest(),
        )
    )
    header = cluster_pb2.DatasetHeader(name="rmat12", version=dataset_version(directory), files=files)
    first = (directory / files[0].name).read_bytes()

    def cut():
        yield cluster_pb2.DatasetChunk(header=header)
        yield cluster_pb2.DatasetChunk(data=cluster_pb2.FileData(chunk=first[: len(first) // 2]))
        raise ConnectionError("the link went down")  # the client cancels the call mid-stream

    def corrupt():
        yield cluster_pb2.DatasetChunk(header=header)
        yield cluster_pb2.DatasetChunk(data=cluster_pb2.FileData(chunk=bytes(len(first))))  # right size, wrong bytes

    channel, stub, metadata = _stub(test_cluster, b)
    with channel:
        with pytest.raises((grpc.RpcError, ConnectionError)):
            stub.ReceiveDataset(cut(), timeout=30, metadata=metadata)
        deadline = time.monotonic() + 10
        while _entries(b) and time.monotonic() < deadline:  # the receiver notices the cancel and cleans up
            time.sleep(0.1)
        assert _entries(b) == []
        with pytest.raises(grpc.RpcError) as bad:
            stub.ReceiveDataset(corrupt(), timeout=30, metadata=metadata)
        assert (
            f"{files[0].name} arrived with sha256" in bad.value.details() and "nothing was kept" in bad.value.details()
        )
        assert bad.value.code() == grpc.StatusCode.DATA_LOSS
        assert _entries(b) == []
