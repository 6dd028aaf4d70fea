"""`graphtier cluster join ADDR` with real daemons started without peers: each join makes every node
list every other, joining again changes nothing, a daemon holding another token or an address
where nothing listens is refused with a clear message and a non-zero exit, and the joined peers
survive a restart (kept in the state directory)."""

from __future__ import annotations

import json
import secrets

import pytest
from cluster_nodes import free_port
from typer.testing import CliRunner

from graphtier.launcher.cli.app import app


def _cli(*args: str):
    return CliRunner().invoke(app, ["cluster", *args], catch_exceptions=False)


def _seen(node) -> dict[str, str]:
    """address -> health, as `cluster status` on `node` lists them."""
    result = _cli("status", "--runtime-dir", str(node.runtime_dir), "--json")
    assert result.exit_code == 0, result.output
    return {n["address"]: n["health"] for n in json.loads(result.stdout)["cluster"]}


def _join(node, address: str):
    return _cli("join", address, "--runtime-dir", str(node.runtime_dir), "--json")


def _kept(node) -> list[str]:
    lines = (node.home / "state" / "cluster-peers").read_text().splitlines()
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.long  # over 20 s on 2 cores: CI's second step
def test_join_admits_both_ways_is_idempotent_refuses_strangers_and_survives_restart(test_cluster, tmp_path):
    a, b, c = (test_cluster.add(peers=[]) for _ in range(3))
    stranger_token = tmp_path / "other.token"
    stranger_token.write_text(secrets.token_hex(32))
    stranger_token.chmod(0o600)
    stranger = test_cluster.add(token=stranger_token, peers=[])
    test_cluster.start()
    assert list(_seen(b)) == [b.address]  # a cluster of one until it joins

    joined = _join(b, a.address)
    assert joined.exit_code == 0, joined.output
    assert [n["address"] for n in json.loads(joined.stdout)["cluster"]] == [b.address, a.address]
    assert _seen(a) == {a.address: "SERVING", b.address: "SERVING"}
    assert _seen(b) == {b.address: "SERVING", a.address: "SERVING"}

    # c joins through b: a, which b lists, admits it too, so every node lists every other.
    assert _join(c, b.address).exit_code == 0
    everyone = {a.address, b.address, c.address}
    for node in (a, b, c):
        seen = _seen(node)
        assert set(seen) == everyone and set(seen.values()) == {"SERVING"}, (node.address, seen)

    again = _join(c, a.address)
    assert again.exit_code == 0, again.output
    assert len(json.loads(again.stdout)["cluster"]) == 3
    assert sorted(_kept(c)) == sorted([a.address, b.address]) and sorted(_kept(a)) == sorted([b.address, c.address])

    refused = _join(stranger, a.address)
    assert refused.exit_code != 0
    assert "refused this daemon" in refused.output and "the token presented is not this daemon's" in refused.output
    assert stranger.address not in _seen(a) and list(_seen(stranger)) == [stranger.address]

    nobody = f"127.0.0.1:{free_port('127.0.0.1')}"
    unreachable = _join(a, nobody)
    assert unreachable.exit_code != 0 and f"node {nobody} is unreachable" in unreachable.output
    bad = _join(a, "no-port-here")
    assert bad.exit_code != 0 and "must be HOST:PORT" in bad.output
    itself = _join(a, a.address)
    assert itself.exit_code != 0 and "is this daemon itself" in itself.output
    assert set(_seen(a)) == everyone

    # b restarts with no --peer: it reads the peers it joined back, and they still list it.
    assert b.process.terminate() == 0
    b.process.start()
    for node in (a, b, c):
        assert set(_seen(node)) == everyone and set(_seen(node).values()) == {"SERVING"}
