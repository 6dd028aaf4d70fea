"""`Cluster`: this daemon and its peers; asks every node how it is, and picks a job's nodes.

One `PeerClient` per configured peer, made at start; a node is named by its `node_name` (learnt
from its GetNode answer) or by its address. `view()` asks every peer at once, each within the
peer timeout, so `cluster status` takes as long as the slowest node, not their sum.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from graphtier.contract.cluster.models import ClusterView, NodeInfo
from graphtier.contract.errors import DaemonError, InvalidRequestError
from graphtier.service.daemon.cluster.peer_client import PeerClient, PeerError
from graphtier.service.daemon.cluster.settings import ClusterConfig

log = logging.getLogger("graphtierd")


class Cluster:
    """This node (`describe_self`) and its peers, by address in configured order."""

    def __init__(
        self,
        config: ClusterConfig,
        *,
        address: str,
        token: str,
        trusted_pem: bytes | None,
        describe_self: Callable[[], NodeInfo],
        joined: Sequence[str] = (),
    ) -> None:
        self.config = config
        self.address = address
        self.name = config.node_name or address
        self.describe_self = describe_self
        self._token, self._trusted = token, trusted_pem
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # node name -> address, learnt from answers
        listed = [*config.peer_addresses(own=address), *joined]
        # Replaced, never changed in place, when a peer joins: readers iterate it without the lock.
        self.peers: dict[str, PeerClient] = {a: self._client(a) for a in dict.fromkeys(listed) if a != address}
        self._extra: dict[str, PeerClient] = {}  # daemons reached that are not configured peers (a coordinator)

    def _client(self, address: str, name: str | None = None) -> PeerClient:
        return PeerClient(
            address, token=self._token, trusted_pem=self._trusted, timeout_s=self.config.peer_timeout_s, name=name
        )

    @property
    def timeout_s(self) -> float:
        return self.config.peer_timeout_s

    def client(self, address: str) -> PeerClient:
        """The client of the daemon at `address` (a configured peer or not)."""
        with self._lock:
            if address in self.peers:
                return self.peers[address]
            if address not in self._extra:
                self._extra[address] = self._client(address)
            return self._extra[address]

    def add_peer(self, address: str) -> bool:
        """Makes the daemon at `address` a peer (`cluster join`); False when it already was one."""
        with self._lock:
            if address in self.peers or address == self.address:
                return False
            client = self._extra.pop(address, None) or self._client(address)
            self.peers = {**self.peers, address: client}
            return True

    def close(self) -> None:
        for peer in [*self.peers.values(), *self._extra.values()]:
            peer.close()

    # Looking at the nodes

    def ask(self, peer: PeerClient) -> NodeInfo:
        """The peer's own description, or a NodeInfo saying why there is none."""
        try:
            node = peer.get_node()
        except PeerError as exc:
            return NodeInfo(name=peer.name, address=peer.address, health=exc.health, message=str(exc))
        node = node.model_copy(update={"address": peer.address, "is_self": False})
        with self._lock:
            self._names[node.name] = peer.address
            peer.name = node.name
        return node

    def view(self) -> ClusterView:
        """This node, then every peer as it answers now."""
        peers = list(self.peers.values())
        if not peers:
            return ClusterView(nodes=[self.describe_self()])
        with ThreadPoolExecutor(max_workers=min(16, len(peers)), thread_name_prefix="graphtier-peers") as pool:
            answers = list(pool.map(self.ask, peers))
        return ClusterView(nodes=[self.describe_self(), *answers])

    def resolve(self, node: str, view: ClusterView) -> NodeInfo:
        """The node of `view` named `node` (its name or address); InvalidRequestError listing the known ones."""
        for candidate in view.nodes:
            if node in (candidate.name, candidate.address):
                return candidate
        known = ", ".join(n.describe() for n in view.nodes)
        raise InvalidRequestError(
            f"node {node!r} is not in this daemon's cluster (nodes: {known}); add it with --peer "
            "or `graphtier cluster join`"
        )

    def choose(self, nnodes: int, names: list[str]) -> list[NodeInfo]:
        """The nodes of a job, node rank order, this daemon first: the ones `names` lists (it must be
        one of them), or this daemon and its first `nnodes - 1` serving peers. InvalidRequestError
        naming the node when one is not serving or there are too few."""
        view = self.view()
        me = view.nodes[0]
        if names:
            if len(set(names)) != len(names):
                raise InvalidRequestError(f"nodes {names} names a node twice")
            chosen = [self.resolve(n, view) for n in names]
            if not any(n.is_self for n in chosen):
                raise InvalidRequestError(
                    f"nodes {names} must include the submitting daemon ({me.describe()}): it "
                    "coordinates the job as node rank 0; submit on one of those nodes"
                )
            if nnodes not in (0, 1, len(chosen)):
                raise InvalidRequestError(f"nnodes {nnodes} differs from the {len(chosen)} nodes given ({names})")
            chosen.sort(key=lambda n: not n.is_self)
        else:
            if nnodes > len(view.nodes):
                raise InvalidRequestError(
                    f"nnodes {nnodes} is more than the {len(view.nodes)} node(s) of this "
                    f"cluster ({', '.join(n.describe() for n in view.nodes)})"
                )
            serving = [n for n in view.nodes if n.serving]
            chosen = serving[:nnodes] if len(serving) >= nnodes else view.nodes[:nnodes]
        for node in chosen:
            if not node.serving:
                raise DaemonError(f"node {node.describe()} cannot take part in the job: {node.health}: {node.message}")
        return chosen
