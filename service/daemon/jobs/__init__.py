"""Running jobs on one daemon: from submit through admission to torchrun, producers and the end.

- `table`: `JobTable`, the jobs this daemon knows, their state, cancel requests and retention,
  written through to a SQLite file so jobs outlive a daemon restart.
- `admission`: `Admission`, the queue in front of the machine's memory and cores.
- `manager`: `JobManager`, submit/inspect/cancel/follow; hands ranks their channels.
- `runner`: `JobRunner`, one job's torchrun plus one producer per rank, watched to the end.
- `events`, `notes`: the job's event log and the notes a spec earns at submit.
- `progress`: reports from a job's processes, turned into metrics.
- `external_launch`: ranks started by another launcher (a Kubeflow TrainJob's torchrun).
- `servicer`: `JobService`, the gRPC boundary of all of the above.
"""
