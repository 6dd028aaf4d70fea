"""`JobRunner`: one job's processes -- a producer per rank and torchrun -- and their supervision.

The runner's thread starts the producers (each must open its channel), then torchrun
(`torch.distributed.run ... -m graphtier.launcher.rank_main`) in its own process
group with output captured to `<job_dir>/job.log`; producers and the torchrun agent are
forked from the daemon's warm forkserver (pipeline/forkserver.py), the ranks are fresh
interpreters started by torchrun. Every tick it feeds the
producers' counters to the progress tracker, turns new log lines and progress into
events, and watches the processes: torchrun's exit status decides SUCCEEDED/FAILED; a
producer that exits non-zero (killed, crashed) FAILS the job with a message naming its pid
and rank -- producers are not restarted behind torchrun's back, except when a restarted
rank re-opens its channel (`open_channel`). On cancel or failure everything is stopped:
SIGTERM to torchrun, which passes it on to its ranks, then SIGKILL to what of the job remains;
producers stopped; stale segments reclaimed. However a job ends, what its ranks left running
outside torchrun's tree (a double fork) is found by the job's token in its environment and
ended (left_behind.py). Ranks another launcher started are never signalled.

The job manager drives a runner through its public methods only: `run`, `cancel(reason)`,
`fail(reason)`, `open_channel`/`release_channel` for its ranks, `channel_stats()` for its
views and reports, `checkpoints()`/`prune_checkpoints()` when it ends.

A part of a multi-node job (a `JobPlacementInfo`) runs this node's ranks only: torchrun with
the job's one c10d rendezvous (`--nnodes --rdzv-endpoint --rdzv-id`, the store
hosted by the coordinator's agent, `--local-addr` this node's address, join and read timeouts
from the peer timeout). The rendezvous, not the daemon, decides which global ranks this node's
processes get (it orders the nodes by address), so a part starts each producer when its rank
first opens its channel, for the global rank the rank names (at most nproc_per_node of them).
A part's torchrun never restarts its ranks itself (`--max-restarts 0`): a failed multi-node job
is restarted by its coordinating daemon, on the nodes that remain (`run(restart=...)`): every
process of the old placement is stopped, then torchrun starts again with the new placement and
the job's new world size, in the same job directory (its checkpoints stay where they were).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from graphtier.contract.environment import JOB_ID_ENV, JOB_TOKEN_ENV, RUNTIME_DIR_ENV
from graphtier.contract.errors import DaemonError
from graphtier.contract.jobs.directory import CHECKPOINT_GLOB, checkpoint_dir, job_log_path, rank_failure_dir
from graphtier.contract.jobs.rank_failures import first_rank_failure
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.view import JobPlacementInfo, LogLine
from graphtier.contract.processes import run_as_job_work, runs_below
from graphtier.service.daemon.jobs.events import RANK_PREFIX
from graphtier.service.daemon.jobs.external_launch import ExternalAgent
from graphtier.service.daemon.jobs.left_behind import describe, end_processes, marked_processes
from graphtier.service.daemon.jobs.mps import GpuShare
from graphtier.service.memory import DeviceMemoryMode
from graphtier.service.pipeline import (
    ChannelError,
    ChannelLayout,
    ChannelStats,
    ProducerConfig,
    ProducerProcess,
    spawn_producer,
)
from graphtier.service.pipeline.config import LinkBatches
from graphtier.service.pipeline.forkserver import ForkedProcess, redirect_output
from graphtier.service.pipeline.peer_rows import PartitionedFeatures
from graphtier.service.shm import reclaim_stale_segments
from graphtier.service.shm.naming import process_start_time
from graphtier.service.store import SharedDatasetHandle

if TYPE_CHECKING:
    from graphtier.service.daemon.cluster.part_watch import Relaunch

TICK_S = 0.2
STOP_GRACE_S = 15.0
# A part failed because of another node: its torchrun agent, told to stop, first tries to close the
# rendezvous on the coordinator's store, which a lost node or a cut link leaves it waiting on for
# the read timeout; the job must end within the peer timeout and a few seconds instead.
LOST_NODE_GRACE_S = 3.0
# What a job left running once torchrun is gone (a process that left the agent's tree) gets this long to
# act on its SIGTERM before SIGKILL; the scan is repeated while it finds more, this many times at most
LEFT_BEHIND_GRACE_S = 3.0
LEFT_BEHIND_ROUNDS = 3
MAX_SOCKET_PATH = 100


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def describe_exit(code: int) -> str:
    return f"was killed by signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exited with status {code}"


ROOT_CAUSE = "Root Cause (first observed failure):"  # how torchrun's agent starts the summary of a failed launch
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.MULTILINE)
_ROOT_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)", re.MULTILINE)
LOG_TAIL_BYTES = 64 << 10


def torchrun_root_cause(log_path: Path) -> str | None:
    """`rank N (pid P) was killed by signal S (NAME)` (or `exited with status C`) from the root cause torchrun's
    agent printed at the end of the job log, for a rank that died without saying why itself (kill -9, the
    OOM killer, a crash in native code); None when the log holds no such summary."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            tail = f.read().decode(errors="replace")
    except OSError:
        return None
    at = tail.rfind(ROOT_CAUSE)
    if at < 0:
        return None
    block = tail[at:]
    rank, exit_ = _ROOT_RANK.search(block), _ROOT_EXIT.search(block)
    if rank is None or exit_ is None:
        return None
    code, pid = int(exit_.group(1)), int(exit_.group(2))
    try:
        how = describe_exit(code)
    except ValueError:  # a signal number this platform does not name
        how = f"was killed by signal {-code}"
    return f"rank {rank.group(1)} (pid {pid}) {how}; torchrun ended the job (see {log_path})"


@dataclass
class RankChannel:
    """One rank's producer and the trainer that last opened its channel."""

    rank: int
    producer: ProducerProcess
    trainer_pid: int = 0
    trainer_start: int | None = None  # its start time when it opened the channel: the pid may be reused
    respawns: int = 0


@dataclass(frozen=True)
class ChannelSnapshot:
    """One rank's producer as it is now: what the job's reports and views read."""

    rank: int
    producer_pid: int
    steps_per_epoch: int
    stats: ChannelStats


class _Tail:
    """New complete lines of a growing file."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(1 << 20)
        except OSError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        return [line.decode(errors="replace").rstrip("\r") for line in complete]


def _processes_under(agent: ForkedProcess) -> list[psutil.Process]:
    """Every process under the agent now: its ranks and theirs. torchrun starts each rank in a session
    of its own, out of reach of a signal to the agent's group; psutil signals a process only while it
    is the one listed here (a pid reused since is left alone)."""
    try:
        return psutil.Process(agent.pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(agent: ForkedProcess, signum: int) -> None:
    """Signal the agent's process group; the agent alone if it has not made its group yet. Not its ranks:
    torchrun starts each in a session of its own, and passes on a SIGTERM to them itself."""
    try:
        os.killpg(agent.pid, signum)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(agent.pid, signum)


def _forked_torchrun(argv: list[str], log_path: str, cwd: str, env: dict[str, str]) -> None:
    """`torchrun ARGV` in a child of the forkserver: its own process group, output to the job log.

    `env` replaces the environment the forkserver was started with: the ranks torchrun starts are
    fresh interpreters that inherit the daemon's environment as of this job (and read their
    OpenMP settings from it).
    """
    from torch.distributed.run import main  # preloaded by the forkserver: no import cost

    os.setsid()  # the runner signals the agent as a group (its ranks, in sessions of their own, one by one)
    run_as_job_work()  # ranks inherit it: the daemon answers its callers first when cores are short
    redirect_output(log_path)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    main(argv)


class JobRunner:
    """The processes of one job; `run()` (on the runner's thread) returns (final state name, message, exit code)."""

    def __init__(
        self,
        job_id: str,
        spec: JobSpec,
        handle: SharedDatasetHandle,
        job_dir: Path,
        runtime_dir: Path,
        on_log: Callable[[LogLine], object],
        *,
        stall_timeout_s: float = 60.0,
        placement: JobPlacementInfo | None = None,
        external: ExternalAgent | None = None,
        partition: PartitionedFeatures | dict[str, PartitionedFeatures] | None = None,
        device_memory: DeviceMemoryMode = "ipc",
        gpu_share: GpuShare | None = None,
        storage_buffer_bytes: int | None = None,
    ) -> None:
        """`storage_buffer_bytes`: each producer's storage buffers, from the memory limit (None: no limit)."""
        self.job_id, self.spec, self.handle = job_id, spec, handle
        self.storage_buffer_bytes = storage_buffer_bytes
        self.device_memory = device_memory  # how a cuda job's device slots are shared with its ranks
        self.gpu_share = gpu_share  # MPS or a grid cap for the producers (service/daemon/jobs/mps.py)
        self.placement, self.external = placement, external
        self.partition = (
            partition  # a partitioned job: this node's rows and the other nodes' daemons (by type: heterogeneous)
        )
        self.lazy_producers = placement is not None or external is not None
        self.failure = ""  # set by fail(): the job ends FAILED with it
        self.job_token = secrets.token_hex(16)  # its ranks' proof that they are this job's (JOB_TOKEN_ENV)
        self.stall_timeout_s = stall_timeout_s
        self.job_dir, self.runtime_dir = job_dir, runtime_dir
        self.log_path = job_log_path(job_dir)
        self.checkpoint_dir = checkpoint_dir(job_dir)
        self.on_log = on_log
        self._cancelled = threading.Event()
        self._cancel_reason = ""
        self.stop_grace_s = STOP_GRACE_S  # SIGTERM to torchrun's group, then SIGKILL after this
        self._lock = threading.RLock()
        self._channels: dict[int, RankChannel] = {}
        self.torchrun: ForkedProcess | None = None
        self.exit_code: int | None = None
        self._tails: dict[int | None, _Tail] = {}
        self._stopped_since: dict[int, float] = {}  # trainer or agent pid -> when it was first seen stopped
        self._scratch: list[Path] = []
        self.relaunches = 0  # times the coordinating daemon restarted the job on a new placement
        cpus = os.cpu_count() or 1
        self.threads = 1 if cpus <= 4 else max(1, cpus // (2 * spec.nproc_per_node))  # each producer's
        # Each rank's torch threads: the cores shared by the ranks. A producer works in bursts (a batch's
        # sampling and gather take a few percent of a training step) and waits passively in between, so
        # leaving it its own cores idled them: a rank trains faster with every core.
        self.rank_threads = max(1, cpus // spec.nproc_per_node)

    # Producers

    def _channel_dir(self, rank: int, attempt: int) -> Path:
        name = f"r{rank}-{attempt}" if not self.relaunches else f"p{self.relaunches}r{rank}-{attempt}"
        directory = self.job_dir / "channels" / name
        if len(str(directory / "producer.sock")) > MAX_SOCKET_PATH:  # Unix socket paths are short
            directory = Path(tempfile.mkdtemp(prefix=f"gt{self.job_id}-r{rank}-"))
            self._scratch.append(directory)
        return directory

    def _spawn(self, rank: int, attempt: int, trainer_pid: int = 0) -> ProducerProcess:
        """Start rank `rank`'s producer; `trainer_pid` (0: not known yet) is the rank it serves."""
        config = ProducerConfig(
            dataset=self.handle,
            rank=rank,
            world_size=self.spec.world_size,
            fanouts=self.spec.fanouts,
            relation_fanouts=self.spec.relation_fanouts,
            batch_size=self.spec.batch_size,
            epochs=self.spec.epochs,
            seed=self.spec.seed,
            num_slots=self.spec.num_slots,
            channel_dir=self._channel_dir(rank, attempt),
            channel=f"j{self.job_id}r{rank}",
            num_threads=self.threads,
            # a producer runs at its rank's priority: the daemon's ranks run as job work, and so do ranks
            # another launcher started that demoted themselves (graphtier.connect does); a demoted producer
            # beside an undemoted rank is starved by it
            demote=self.external is None or bool(trainer_pid and runs_below(trainer_pid)),
            storage_reads=self.spec.storage_reads,
            window=self.spec.window,
            storage_buffer_bytes=self.storage_buffer_bytes,
            partition=self.partition if not isinstance(self.partition, dict) else None,
            hetero_partitions=self.partition if isinstance(self.partition, dict) else {},
            link=(
                LinkBatches(negatives=self.spec.negatives, negative_sampling=self.spec.negative_sampling)
                if self.spec.task == "link"
                else None
            ),
            sampler="gpu" if self.spec.sampler == "gpu" else "cpu",
            # a cuda job's producer gathers into slots on its rank's GPU (cuda:LOCAL_RANK under torchrun)
            device=self.spec.device,
            device_memory=self.device_memory,
            gpu_env=self.gpu_share.producer_env() if self.gpu_share is not None else {},
            grid_share=self.gpu_share.grid_share if self.gpu_share is not None else None,
            device_index=rank % self.spec.nproc_per_node
            if self.spec.device == "cuda" or self.spec.sampler == "gpu"
            else 0,
        )
        try:
            producer = spawn_producer(config)
        except ChannelError as exc:
            raise DaemonError(f"job {self.job_id}: the producer of rank {rank} did not start: {exc}") from None
        self._tails[rank] = _Tail(producer.log_path)
        return producer

    def open_channel(self, rank: int, trainer_pid: int) -> ChannelLayout:
        """The layout of the rank's channel for trainer `trainer_pid`; a new trainer (a restarted rank)
        gets a fresh producer."""
        return self._reopen(rank, trainer_pid).layout

    def release_channel(self, rank: int) -> int:
        """Rank `rank` gave its channel back (a launch the daemon did not start ends with its ranks);
        the batches it consumed."""
        with self._lock:
            channel = self._channels.get(rank)
            if self.external is not None:
                self.external.released.add(rank)
        return channel.producer.stats().batches_consumed if channel is not None else 0

    def channel_stats(self) -> list[ChannelSnapshot]:
        """Every started producer's counters now, by rank."""
        with self._lock:
            producers = sorted((c.rank, c.producer) for c in self._channels.values())
        return [ChannelSnapshot(rank, p.pid, p.layout.steps_per_epoch, p.stats()) for rank, p in producers]

    def checkpoints(self) -> list[Path]:
        """The job's checkpoints, oldest first (their names hold zero-padded steps)."""
        return sorted(self.checkpoint_dir.glob(CHECKPOINT_GLOB))

    def prune_checkpoints(self, *, keep_newest: bool) -> None:
        """Remove the job's checkpoints: all of them, or all but the newest."""
        checkpoints = self.checkpoints()
        for old in checkpoints[:-1] if keep_newest else checkpoints:
            old.unlink(missing_ok=True)

    def _reopen(self, rank: int, trainer_pid: int) -> ProducerProcess:
        with self._lock:
            channel = self._channels.get(rank)
            if channel is None and self.lazy_producers:
                return self._first_open(rank, trainer_pid)
            if channel is None:
                raise DaemonError(f"job {self.job_id}: the producer of rank {rank} has not started yet")
            code = channel.producer.poll()
            if code not in (None, 0):
                raise DaemonError(
                    f"job {self.job_id}: producer pid {channel.producer.pid} of rank {rank} {describe_exit(code)}"
                )
            if trainer_pid:
                self._check_own_process(trainer_pid)
            restarted = channel.trainer_pid not in (0, trainer_pid) and trainer_pid != 0
            if restarted or code == 0:
                channel.producer.stop()
                channel.respawns += 1
                self._tails.pop(rank, None)
                channel.producer = self._spawn(rank, channel.respawns, trainer_pid or channel.trainer_pid)
            channel.trainer_pid = trainer_pid
            channel.trainer_start = process_start_time(trainer_pid) if trainer_pid else None
            return channel.producer

    def _first_open(self, rank: int, trainer_pid: int) -> ProducerProcess:
        """A multi-node part's rank opens its channel for the first time: its producer starts now."""
        if len(self._channels) >= self.spec.nproc_per_node:
            raise DaemonError(
                f"job {self.job_id}: this node runs {self.spec.nproc_per_node} rank(s), already "
                f"{sorted(self._channels)}; rank {rank} belongs to another node"
            )
        if trainer_pid:
            self._check_own_process(trainer_pid)
        if self.external is not None:
            self.external.opened.add(rank)
        channel = RankChannel(
            rank,
            self._spawn(rank, 0, trainer_pid),
            trainer_pid=trainer_pid,
            trainer_start=process_start_time(trainer_pid) if trainer_pid else None,
        )
        self._channels[rank] = channel
        return channel.producer

    def _check_own_process(self, pid: int) -> None:
        """DaemonError unless `pid` is a process torchrun started for this job (the daemon will
        signal it when the job stops: it must never be someone else's process). A launch the daemon
        did not start is checked against its agent when the daemon can see it, and never signalled."""
        if self.external is not None and not self.external.pid:
            return
        agent = self.external.pid if self.external is not None else self.torchrun.pid if self.torchrun else None
        try:
            parents = {p.pid for p in psutil.Process(pid).parents()}
        except psutil.Error:
            parents = set()
        if agent is None or (agent not in parents and pid != agent):  # a plain `python train.py` is its own agent
            raise DaemonError(
                f"job {self.job_id}: trainer pid {pid} is not a rank of this job (not a child of its "
                f"torchrun agent, pid {agent})"
            )

    @property
    def restarts(self) -> int:
        """Restarts so far: of the whole job on a new placement, or of its ranks by torchrun."""
        with self._lock:
            return self.relaunches + max((c.respawns for c in self._channels.values()), default=0)

    # The job

    @property
    def cancelled(self) -> threading.Event:
        """Set once the job is to stop (`cancel` or `fail`): what a queued job's admission waits on too."""
        return self._cancelled

    @property
    def cancel_reason(self) -> str:
        return self._cancel_reason

    def cancel(self, reason: str) -> None:
        """Stop the job: its processes are stopped and it ends CANCELLED with `reason`."""
        self._cancel_reason = reason or "cancelled"
        self._cancelled.set()

    def fail(self, reason: str) -> None:
        """End the job FAILED with `reason` (a lost or failed peer node): its processes are stopped as
        for a cancel, but killed after LOST_NODE_GRACE_S rather than STOP_GRACE_S."""
        self.failure = self.failure or reason
        self.stop_grace_s = min(self.stop_grace_s, LOST_NODE_GRACE_S)
        self._cancelled.set()

    def _rendezvous_args(self) -> list[str]:
        """torchrun's node and rendezvous arguments: this machine alone, or this node's place in the job."""
        p = self.placement
        if p is None:
            return [
                "--nnodes",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"127.0.0.1:{free_port()}",
                "--rdzv-id",
                f"job-{self.job_id}",
            ]
        timeout = max(1, round(p.peer_timeout_s))
        conf = f"is_host={str(p.rdzv_host).lower()},join_timeout={max(timeout, 30)},read_timeout={max(timeout, 30)}"
        # no --node-rank: torchrun ignores it for c10d (and warns); the rendezvous numbers the nodes
        return [
            "--nnodes",
            str(p.nnodes),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            p.rdzv_endpoint,
            "--rdzv-id",
            p.rdzv_id,
            "--rdzv-conf",
            conf,
            "--local-addr",
            p.local_addr,
        ]

    def _start(self) -> None:
        if self.external is not None:
            return  # the launcher's torchrun runs the ranks; producers start as they open their channels
        # an inference job's ranks read the tiers themselves, layer by layer: no producers, no channels
        producers = () if self.lazy_producers or self.spec.infers else range(self.spec.nproc_per_node)
        for rank in producers:
            if self._cancelled.is_set():
                return
            producer = self._spawn(rank, 0)
            with self._lock:
                self._channels[rank] = RankChannel(rank, producer)
        argv = [
            *self._rendezvous_args(),
            "--nproc-per-node",
            str(self.spec.nproc_per_node),
            "--max-restarts",
            # a multi-node job is restarted by its coordinating daemon, on the nodes that remain: a
            # part's torchrun retrying alone would wait for the lost node at the old rendezvous
            str(self.spec.max_restarts if self.placement is None else 0),
            "--log-dir",
            str(self.job_dir / "torchelastic"),  # not a torchelastic_* directory left in /tmp
            "-m",
            "graphtier.launcher.rank_main",
            "--job-id",
            self.job_id,
            "--runtime-dir",
            str(self.runtime_dir),
        ]
        if self.spec.script:
            argv += ["--script", self.spec.script, "--", *self.spec.args]
        env = {
            **os.environ,
            "OMP_NUM_THREADS": str(self.rank_threads),
            "OMP_WAIT_POLICY": "PASSIVE",
            "PYTHONUNBUFFERED": "1",
            JOB_ID_ENV: self.job_id,
            RUNTIME_DIR_ENV: str(self.runtime_dir),
            JOB_TOKEN_ENV: self.job_token,
            **(self.gpu_share.rank_env() if self.gpu_share is not None else {}),
        }
        self._tails[None] = _Tail(self.log_path)
        self.torchrun = ForkedProcess(
            _forked_torchrun,
            (argv, str(self.log_path), str(self.job_dir), env),
            name=f"graphtier-torchrun-{self.job_id}",
        )

    def _failed_producer(self) -> str | None:
        """Why a producer failed the job -- it died, or it lives without a heartbeat -- or None."""
        with self._lock:
            for channel in self._channels.values():
                producer, code = channel.producer, channel.producer.poll()
                where = f"producer pid {producer.pid} of rank {channel.rank}"
                if code not in (None, 0):
                    error = producer.stats().error
                    detail = f": {error}" if error else ""
                    return f"{where} {describe_exit(code)}{detail}; log {producer.log_path}"
                age = producer.stats().heartbeat_age_s if code is None else 0.0
                if age > self.stall_timeout_s:
                    return (
                        f"{where} is alive but has shown no progress for {age:.0f} s (stall timeout "
                        f"{self.stall_timeout_s:g} s): stopped (SIGSTOP), swapping or deadlocked; "
                        f"log {producer.log_path}"
                    )
        return None

    def _stopped_rank(self) -> str | None:
        """Why a process of the job failed it by standing still -- a trainer stopped (SIGSTOP, a debugger)
        longer than the stall timeout, which would otherwise hang every rank in the next collective
        until the process group's own timeout, or the torchrun agent stopped as long, which would never
        see its ranks end, fail or need a restart -- or None."""
        now = time.monotonic()
        with self._lock:
            watched = {
                c.trainer_pid: (
                    f"rank {c.rank} (trainer pid {c.trainer_pid})",
                    "the other ranks would wait for it in their next collective",
                )
                for c in self._channels.values()
                if c.trainer_pid
            }
        agent = self.external if self.external is not None else self.torchrun
        if agent is not None and agent.pid > 0:
            watched[agent.pid] = (
                f"the torchrun agent (pid {agent.pid})",
                "it would never see its ranks end, fail or need a restart, and the job would not end",
            )
        for pid, (what, why) in watched.items():
            try:
                stopped = psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
            except psutil.Error:
                stopped = False
            if not stopped:
                self._stopped_since.pop(pid, None)
                continue
            since = self._stopped_since.setdefault(pid, now)
            if now - since > self.stall_timeout_s:
                return (
                    f"{what} has been stopped for {now - since:.0f} s (stall timeout {self.stall_timeout_s:g} s): "
                    f"SIGSTOP or a debugger; {why}"
                )
        return None

    def pump_logs(self) -> None:
        for rank, tail in list(self._tails.items()):
            for text in tail.lines():
                if rank is None:
                    match = RANK_PREFIX.match(text)
                    self.on_log(LogLine(text=text, rank=int(match.group(1)) if match else None))
                else:
                    self.on_log(LogLine(text=text, rank=rank, from_producer=True, stream="stderr"))

    def run(
        self,
        tick: Callable[[], None],
        restart: Callable[[str], Relaunch | None] | None = None,
        settle: Callable[[], str | None] | None = None,
    ) -> tuple[str, str, int | None]:
        """Start, supervise and clean up; `tick()` is called every TICK_S while the job runs. A success
        here is confirmed by `settle` (a multi-node job's coordinating daemon: the other nodes' parts
        ended well too), which may name a failure instead. A failure is offered to `restart`: given the
        next placement, every process is stopped and the job starts again on it; given None, the job
        ends FAILED."""
        try:
            self._start()
            while True:
                outcome = self._supervise(tick)
                if outcome[0] == "succeeded" and settle is not None and (problem := settle()):
                    outcome = ("failed", problem, outcome[2])
                if outcome[0] != "failed" or restart is None:
                    return outcome
                self._stop_all()  # nothing of this placement may be left when the next one starts
                relaunch = restart(outcome[1]) if not self._cancel_reason else None
                if self._cancel_reason:  # a cancel that came while the restart was decided ends the job
                    return "cancelled", self._cancel_reason, self.exit_code
                if relaunch is None:
                    return outcome
                self._relaunch(relaunch)
        except DaemonError as exc:
            self._stop_all()
            if self.failure:
                return "failed", self.failure, self.exit_code
            return (
                ("cancelled", self._cancel_reason, self.exit_code)
                if self._cancelled.is_set()
                else ("failed", str(exc), self.exit_code)
            )
        finally:
            self._stop_all()
            self.pump_logs()

    def _relaunch(self, relaunch: Relaunch) -> None:
        """Start the job again on `relaunch`'s placement (this node's processes were stopped): the
        spec's world size is the new one, so the producers reshard the training ids by it."""
        self.pump_logs()
        with self._lock:
            if self._cancel_reason:  # a cancel that came while the placement was being decided wins
                return
            self._channels.clear()
            self._tails = {None: self._tails[None]} if None in self._tails else {}
            self._stopped_since.clear()
            self.spec, self.placement = relaunch.spec, relaunch.placement
            self.torchrun, self.exit_code, self.failure = None, None, ""
            self.stop_grace_s = STOP_GRACE_S
            self.relaunches += 1
            self._cancelled.clear()
        # the old placement's rank failures were reported; its attempt numbers start again at 0
        shutil.rmtree(rank_failure_dir(self.job_dir), ignore_errors=True)
        self._start()
        try:
            relaunch.start_members()
        except DaemonError as exc:
            self.fail(f"the restart on {relaunch.nodes} failed: {exc}")

    def _supervise(self, tick: Callable[[], None]) -> tuple[str, str, int | None]:
        """Supervise the processes running now until the job ends on this placement."""
        while True:
            self.pump_logs()
            if self._cancelled.is_set():
                if self.failure:
                    return "failed", self.failure, self._stop_all()
                return "cancelled", self._cancel_reason or "cancelled", self._stop_all()
            died = self._failed_producer() or self._stopped_rank()
            if died is not None:
                self._stop_all()
                return "failed", died, self.exit_code
            agent = self.external if self.external is not None else self.torchrun
            assert agent is not None
            code = agent.poll()
            if code is not None and self.external is not None:
                self.exit_code = code
                tick()
                return ("succeeded", "", code) if code == 0 else ("failed", self.external.why, code)
            if code is not None:
                self.exit_code = code
                tick()
                if code == 0:
                    return "succeeded", "", code
                time.sleep(TICK_S)  # a producer killed under the ranks is the cause, not the symptom
                died = self._failed_producer() or first_rank_failure(self.job_dir) or torchrun_root_cause(self.log_path)
                return "failed", died or f"torchrun {describe_exit(code)}; see {self.log_path}", code
            tick()
            time.sleep(TICK_S)

    def _end_left_behind(self) -> None:
        """End what the job left running once torchrun and its ranks are gone: a process that left the
        agent's tree (a double fork, a helper a user's script daemonised), which no signal to the tree
        reaches. Every process the job's ranks start holds the job's id and token in its environment
        (left_behind.py); those found get SIGTERM, SIGKILL after `LEFT_BEHIND_GRACE_S`, and a line in the
        job log. Scanned again while a round finds more (a helper that forks anew), `LEFT_BEHIND_ROUNDS`
        times at most."""
        named: list[str] = []
        killed = 0
        for _ in range(LEFT_BEHIND_ROUNDS):
            left = marked_processes({JOB_ID_ENV: self.job_id, JOB_TOKEN_ENV: self.job_token})
            if not left:
                break
            named += [describe(process) for process in left]
            killed += len(end_processes(left, LEFT_BEHIND_GRACE_S))
        if not named:
            return
        note = (
            f"graphtierd: ended {len(named)} process(es) this job left running after its ranks ({'; '.join(named)}); "
            f"{killed} of them ignored SIGTERM and were killed. A job's processes end with it."
        )
        with contextlib.suppress(OSError), open(self.log_path, "a") as out:
            out.write(note + "\n")

    def _stop_all(self) -> int | None:
        """Stop torchrun, every process under it and every producer; reclaim segments of the dead. Idempotent."""
        if self.torchrun is not None and self.torchrun.poll() is None:
            under = _processes_under(self.torchrun)
            _signal_group(self.torchrun, signal.SIGTERM)
            _signal_group(self.torchrun, signal.SIGCONT)
            for process in under:  # a stopped rank acts on the SIGTERM torchrun passes on only once continued
                with contextlib.suppress(psutil.Error):
                    process.resume()
            try:
                self.torchrun.wait(self.stop_grace_s)
            except subprocess.TimeoutExpired:
                under += _processes_under(self.torchrun)
                _signal_group(self.torchrun, signal.SIGKILL)
                self.torchrun.wait()
            # what outlived its agent (a rank that ignores SIGTERM) is killed, and gone before its segments are
            # reclaimed below: nothing of the job stays
            end_processes(under, term_grace_s=0)
        if self.torchrun is not None:
            self.exit_code = self.torchrun.returncode
        with self._lock:
            channels = list(self._channels.values())
        for channel in channels:
            started = channel.trainer_start
            if self.external is not None:
                started = None  # another launcher's ranks: never signalled by the daemon
            if channel.trainer_pid and started is not None and process_start_time(channel.trainer_pid) == started:
                with contextlib.suppress(ProcessLookupError):  # a rank torchrun did not take down
                    os.kill(channel.trainer_pid, signal.SIGKILL)
            channel.producer.stop()
        if self.external is None:
            self._end_left_behind()
        reclaim_stale_segments()
        for directory in self._scratch:
            shutil.rmtree(directory, ignore_errors=True)
        return self.exit_code
