"""The daemon's side of a cluster of daemons (one per machine).

- `settings`: `ClusterConfig`, the peers and this node's name (the daemon config's `cluster:`).
- `peer_client`: `PeerClient`, calls to another daemon over TLS with the cluster's token.
- `membership`: `Cluster`, this node and its peers; `cluster status` and a job's node choice.
- `joining`: `cluster join` (JoinCluster, AdmitPeer) and the peers so joined, kept across restarts.
- `node_info`: what this daemon says about itself (datasets with versions, load).
- `coordinator`: `JobCoordinator`, a multi-node job from submit to a part on every node.
- `part_watch`: the parts of a multi-node job watching each other through their daemons.
- `dataset_transfer`: `dataset push`, streamed and checked, written atomically.
- `node`: `ClusterNode`, the facade the daemon and its servicer use; `servicer`: ClusterService.
"""
