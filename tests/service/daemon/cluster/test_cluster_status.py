"""A cluster of real daemons on one machine: every node lists every other from any node, and a
node that cannot prove it belongs (another token, no token, plaintext to TLS) is refused, saying why."""

from __future__ import annotations

import json
import secrets

import grpc
import pytest
from typer.testing import CliRunner

from graphtier.launcher.cli.app import app
from graphtier.v1 import cluster_pb2, cluster_pb2_grpc


def _status(node) -> dict:
    result = CliRunner().invoke(
        app, ["cluster", "status", "--runtime-dir", str(node.runtime_dir), "--json"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_every_node_sees_every_node_and_outsiders_are_refused(test_cluster, small_rmat, tmp_path):
    good = [test_cluster.add([small_rmat.directory]) for _ in range(2)]
    stranger_token = tmp_path / "other.token"
    stranger_token.write_text(secrets.token_hex(32))
    stranger_token.chmod(0o600)
    stranger = test_cluster.add(token=stranger_token)
    plaintext = test_cluster.add(extra=("--insecure",), peers=[good[0].address])
    test_cluster.start()

    nodes = {n["address"]: n for n in _status(good[1])["cluster"]}
    assert list(nodes)[0] == good[1].address and nodes[good[1].address]["is_self"]
    for node in good:
        seen = nodes[node.address]
        assert seen["health"] == "SERVING" and seen["pid"] == node.process.pid
        assert [d["name"] for d in seen["datasets"]] == ["rmat12"] and len(seen["datasets"][0]["version"]) == 64
        assert seen["load"]["cpus"] >= 1 and seen["load"]["memory_total_bytes"] > 0
    refused = nodes[stranger.address]
    assert refused["health"] == "REFUSED" and "the token presented is not this daemon's" in refused["message"]
    assert "same token" in refused["message"]
    # the plaintext node is not good[1]'s peer, but it is good[0]'s: that node's view of the cluster
    from_plaintext = {n["address"]: n for n in _status(plaintext)["cluster"]}
    assert from_plaintext[good[0].address]["health"] == "REFUSED"
    assert "not gRPC over plaintext" in from_plaintext[good[0].address]["message"]

    # Anyone else on TCP: no token, or a wrong one, gets nothing, TLS or not.
    trusted = grpc.ssl_channel_credentials(root_certificates=test_cluster.cert.read_bytes())
    with grpc.secure_channel(good[0].address, trusted) as channel:
        stub = cluster_pb2_grpc.ClusterServiceStub(channel)
        for metadata, why in (
            ((), "no token was presented"),
            ((("authorization", "Bearer " + "0" * 64),), "not this daemon's"),
        ):
            with pytest.raises(grpc.RpcError) as refused_call:
                stub.GetNode(cluster_pb2.GetNodeRequest(), timeout=10, metadata=metadata)
            assert refused_call.value.code() == grpc.StatusCode.UNAUTHENTICATED and why in refused_call.value.details()
        token = test_cluster.token.read_text().strip()
        node = stub.GetNode(cluster_pb2.GetNodeRequest(), timeout=10, metadata=(("authorization", f"Bearer {token}"),))
        assert node.address == good[0].address and node.health == "SERVING"
