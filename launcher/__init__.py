"""graphtier.launcher: everything on the job's side, starting with the `graphtier` CLI.

`loader` is the public API of a training script and `rank_main` the command torchrun runs for
each rank; they compose `runtime/` (what runs inside a rank) and `client/` (talking to the
daemon over gRPC: `DaemonClient`, and `DataPlaneClient` for processes that attach to its
shared memory). `cli/` is the `graphtier` command. The daemon is reached over gRPC and started
as a process, never imported.
"""
