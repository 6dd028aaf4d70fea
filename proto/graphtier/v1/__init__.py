"""graphtier.v1: the versioned gRPC contract; generated modules sit next to their `.proto` files.

`common` (segment refs, tier budgets/boundaries/counters), `datasets` (DatasetService),
`jobs` (JobService), `channels` (ChannelService), `progress` (ProgressService), `cluster`
(ClusterService: nodes, multi-node job parts, dataset streams): import
`graphtier.v1.<name>_pb2` for messages and `graphtier.v1.<name>_pb2_grpc` for stubs and
servicers. They are made by `proto/generate.py`; never edit them by hand.
"""
