"""The Python side of graphtier's gRPC contract, shared by the daemon and every client.

The generated messages live in `graphtier.v1` (`proto/graphtier/v1`); this package holds
what both sides build from them: the request and response models, their protobuf
conversions, the errors a call can end with, and how a client finds a running daemon.
Like containerd's `api/`, it imports neither the daemon nor torch, so a client that only
talks to the daemon (the CLI's `job status`, `metrics`, ...) starts in a fraction of a
second. The layouts a rank attaches to carry the data plane's handles, so their wire form is
the data plane's: `graphtier.service.store.wire` and `graphtier.service.pipeline.wire`.
"""
