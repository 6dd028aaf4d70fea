"""`cluster join`: a running daemon joins another's cluster, and the peers so joined are kept.

`join(ADDR)` (JoinCluster, asked by `graphtier cluster join ADDR`) calls AdmitPeer on ADDR with
this daemon's token over TLS, like every peer call, so a daemon holding another token is refused
there, saying so. The admitting daemon asks the joiner's GetNode back (the address must reach a
daemon that holds the token and serves a certificate it trusts), adds it to its peers and answers
its view of the cluster; the joiner adds ADDR, then asks every other node of that view to admit it
too, so every node lists every other. Joining a peer already known changes nothing.

Both sides write the peers they gained to `JoinedPeers` (`<state_dir>/cluster-peers`, a hosts
file), which the daemon reads back at start with its configured peers: a joined cluster survives
a restart. Deleting a line there (with the daemon stopped) forgets that peer.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from graphtier.contract.cluster.models import ClusterView
from graphtier.contract.errors import DaemonError, InvalidRequestError
from graphtier.service.daemon.cluster.membership import Cluster
from graphtier.service.daemon.cluster.peer_client import PeerError
from graphtier.service.daemon.cluster.settings import format_address, parse_peer, read_hosts_file

log = logging.getLogger("graphtierd")

UNREACHABLE_HOSTS = ("0.0.0.0", "::", "")


class JoinedPeers:
    """The hosts file of the peers this daemon joined or admitted at run time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def load(self) -> list[str]:
        """The addresses kept, in order; DaemonError naming the file when it is not a hosts file."""
        if not self.path.exists():
            return []
        try:
            return read_hosts_file(self.path)
        except ValueError as exc:
            raise DaemonError(f"the joined peers file is damaged: {exc}; fix or delete {self.path}") from None

    def add(self, address: str) -> None:
        """Keeps `address` (once), replacing the file atomically."""
        with self._lock:
            kept = self.load()
            if address in kept:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(self.path.name + ".tmp")
            header = "# peers joined with `graphtier cluster join` (or that joined this node); one HOST:PORT per line\n"
            temporary.write_text(header + "".join(f"{a}\n" for a in [*kept, address]))
            os.replace(temporary, self.path)


def _address(text: str, what: str) -> str:
    try:
        return format_address(*parse_peer(text, what=what))
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from None


def _reachable_self(cluster: Cluster) -> None:
    host, _ = parse_peer(cluster.address)
    if host in UNREACHABLE_HOSTS:
        raise InvalidRequestError(
            f"this daemon listens on {cluster.address}, no address a peer can reach: give it "
            "cluster.advertise HOST:PORT (or a concrete --tcp host) before joining"
        )


def admit(cluster: Cluster, book: JoinedPeers, address: str) -> ClusterView:
    """Adds the daemon at `address` to this daemon's peers once it answered as one of the cluster."""
    address = _address(address, "joining daemon's address")
    if address == cluster.address:
        raise InvalidRequestError(f"{address} is this daemon's own address: a daemon cannot join itself")
    joiner = cluster.ask(cluster.client(address))
    if not joiner.serving:
        raise DaemonError(
            f"node {cluster.name} ({cluster.address}) cannot admit {address}: asked back, it is "
            f"{joiner.health}: {joiner.message}"
        )
    clash = next((n for n in cluster.view().nodes if n.name == joiner.name and n.address != address), None)
    if clash is not None:
        raise InvalidRequestError(
            f"the joining daemon at {address} is named {joiner.name!r}, as node "
            f"{clash.describe()} already is: give it another node_name"
        )
    if cluster.add_peer(address):
        book.add(address)
        log.info("cluster: admitted %s (%s) as a peer", joiner.name, address)
    return cluster.view()


def join(cluster: Cluster, book: JoinedPeers, address: str) -> ClusterView:
    """Joins the cluster of the daemon at `address`: it and every node it lists admit this one."""
    target = _address(address, "cluster address")
    if target == cluster.address:
        raise InvalidRequestError(f"{target} is this daemon itself: give the address of another daemon to join")
    _reachable_self(cluster)
    theirs = cluster.client(target).admit_peer(cluster.address)  # PeerError names the node and why
    gained = [target] if cluster.add_peer(target) else []
    others = [n for n in theirs.nodes if n.address not in (target, cluster.address)]
    for node in others:
        try:
            cluster.client(node.address).admit_peer(cluster.address)
        except PeerError as exc:
            log.warning("cluster join: %s, listed by %s, did not admit this node: %s", node.describe(), target, exc)
            continue
        if cluster.add_peer(node.address):
            gained.append(node.address)
    for peer in gained:
        book.add(peer)
    log.info("cluster: joined the cluster of %s; new peers: %s", target, ", ".join(gained) or "none (already joined)")
    return cluster.view()
