"""Ranks started by a launcher other than the daemon (a Kubeflow TrainJob's torchrun): what the
daemon knows of that launch and how it tells when the node's part of it has ended.

The launch's ranks on a node find their job by a secret the first of them made (`launch_secret`:
the launch id, which anyone who sees `ps` may guess, finds nothing), and only as the job's owner.
Their ranks already run when the job is made, so the job is admitted at once (admission.py cannot
hold them back; it counts what they hold). The daemon runs no torchrun for such a job and never
signals its ranks: it starts a producer
when a rank first opens its channel (for the global rank the rank names) and watches. The part
ends when every rank of the node has given its channel back (succeeded if each reported its
end, failed otherwise), when a rank recorded a failure, or when the launcher's agent -- the
ranks' parent, if the daemon can see it (same PID namespace) -- exits first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from graphtier.contract.jobs.rank_failures import first_rank_failure
from graphtier.service.shm.naming import process_start_time


@dataclass(frozen=True)
class ExternalLaunch:
    """One launch's ranks on this node, as the first of them described it (AttachJob)."""

    launch_id: str
    node_rank: int
    agent_pid: int = 0  # 0: the launcher's agent is not visible from the daemon
    agent_start: int | None = None  # its start time: the pid may be reused
    secret_digest: str = ""  # SHA-256 of the secret the launch's ranks share: how a later rank finds the job


@dataclass
class ExternalAgent:
    """Stands in for torchrun's exit status: `poll()` is None while the launch's ranks run here."""

    launch: ExternalLaunch
    job_dir: Path
    nproc: int
    ranks_done: Callable[[set[int]], bool]  # every given rank reported the end of its training
    released: set[int] = field(default_factory=set)
    opened: set[int] = field(default_factory=set)
    returncode: int | None = None
    why: str = ""

    @property
    def pid(self) -> int:
        return self.launch.agent_pid

    def agent_alive(self) -> bool:
        launch = self.launch
        return not launch.agent_pid or process_start_time(launch.agent_pid) == launch.agent_start

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        failure = first_rank_failure(self.job_dir)
        if failure:
            self.returncode, self.why = 1, failure
        elif len(self.released) >= self.nproc:
            done = self.ranks_done(self.released)
            self.returncode = 0 if done else 1
            self.why = "" if done else f"rank(s) {sorted(self.released)} gave their channels back before finishing"
        elif not self.agent_alive():
            done = bool(self.opened) and self.ranks_done(self.opened)
            self.returncode = 0 if done else 1
            self.why = (
                ""
                if done
                else (
                    f"the launcher's agent (pid {self.launch.agent_pid}, launch "
                    f"{self.launch.launch_id}) exited before this node's ranks finished"
                )
            )
        return self.returncode
