"""How a CUDA job's producers share its GPUs with the ranks: under MPS, or with a capped grid.

A producer gathers (and may sample) on its rank's GPU; left alone its kernels would take every
SM from training. Two ways keep it to a slice (`--producer-sm-share`, percent of the SMs):

- **MPS** (`--mps use`): producers connect to a reachable MPS control daemon (its pipe directory,
  `CUDA_MPS_PIPE_DIRECTORY`, else the driver's default /tmp/nvidia-mps) with
  `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` set to the share before CUDA initialises in them. The job's
  ranks connect to the same control daemon without a limit: clients of one MPS server run side by
  side, where a process outside it would only time-slice with them.
- **Managed MPS** (`--mps manage`): the daemon starts `nvidia-cuda-mps-control -d` itself, with
  pipe and log directories of its own under its runtime directory (`mps/pipe`, `mps/log`), while
  a job needs it, and stops it (`quit`) when the last such job ends, when the daemon stops, and at
  the next start of a daemon on the same runtime directory after a crash (`recover`).
- **Grid cap** (`--mps off`): no MPS; the producers' kernels run on at most the share's worth of
  SMs (the gather's and sampler's `sm_share`).

`auto` (the default) is `use` where a control daemon answers, else `off`. The job's status says
which was used and why (`GpuShare.describe`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.jobs.spec import JobSpec

log = logging.getLogger("graphtierd")

MPS_CONTROL = "nvidia-cuda-mps-control"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"  # the driver's, when CUDA_MPS_PIPE_DIRECTORY is unset
PIPE_ENV = "CUDA_MPS_PIPE_DIRECTORY"
LOG_ENV = "CUDA_MPS_LOG_DIRECTORY"
PERCENTAGE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
CONTROL_PIPE = "control"  # the control daemon's FIFO in its pipe directory
PID_FILE = "nvidia-cuda-mps-control.pid"  # written by the control daemon in its pipe directory
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def control_reachable(pipe_directory: str | Path) -> bool:
    """True when an MPS control daemon's FIFO is in `pipe_directory`."""
    try:
        return stat.S_ISFIFO(os.stat(Path(pipe_directory) / CONTROL_PIPE).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class GpuShare:
    """A job's decision: `mode` (off, use, manage), the control daemon's pipe directory (use and
    manage), the producers' share of the SMs in percent, and why."""

    mode: Literal["off", "use", "manage"]
    percentage: float
    reason: str
    pipe_directory: str | None = None
    cuda: bool = True

    def describe(self) -> str:
        """One line for `job status` and /v1/status."""
        if not self.cuda:
            return f"producers use no GPU: {self.reason}"
        if self.mode == "off":
            return f"producers capped by grid to ~{self.percentage:g}% of the SMs: {self.reason}"
        return f"producers under MPS ({self.mode}) at {self.percentage:g}% of the SMs: {self.reason}"

    def producer_env(self) -> dict[str, str]:
        """What a producer sets in its environment before CUDA initialises (empty without MPS)."""
        if not self.cuda or self.mode == "off" or self.pipe_directory is None:
            return {}
        return {PIPE_ENV: self.pipe_directory, PERCENTAGE_ENV: f"{self.percentage:g}"}

    def rank_env(self) -> dict[str, str]:
        """What the job's ranks get under MPS: the same control daemon, at no limit of their own.
        Clients of one MPS server run their kernels side by side; a rank outside it would only
        time-slice with the producers' server, and the share would mean nothing."""
        if not self.cuda or self.mode == "off" or self.pipe_directory is None:
            return {}
        return {PIPE_ENV: self.pipe_directory}

    @property
    def grid_share(self) -> float | None:
        """The share (0, 1] a producer's kernels cap their grid to; None under MPS (MPS limits it)."""
        return self.percentage / 100 if self.cuda and self.mode == "off" else None


class MpsControl:
    """The daemon's MPS: the control daemon it may use, and the one it runs itself for `manage`."""

    def __init__(self, runtime_dir: Path, *, pipe_directory: str | None = None) -> None:
        self.shared_pipe_directory = pipe_directory or os.environ.get(PIPE_ENV) or DEFAULT_PIPE_DIRECTORY
        self.managed_dir = Path(runtime_dir) / "mps"
        self.pipe_directory = self.managed_dir / "pipe"
        self.log_directory = self.managed_dir / "log"
        self._lock = threading.Lock()
        self._users: set[str] = set()
        self._binary: str | None = None

    # Deciding, at submit

    def decide(self, spec: JobSpec) -> GpuShare:
        """The job's GPU share; InvalidRequestError (one line) for a mode this machine cannot give."""
        share = spec.producer_sm_share
        if spec.device != "cuda":
            return GpuShare("off", share, "a CPU job", cuda=False)
        mode, reachable = spec.mps, control_reachable(self.shared_pipe_directory)
        where = f"{self.shared_pipe_directory}/{CONTROL_PIPE}"
        if mode == "auto":
            if reachable:
                return GpuShare("use", share, f"a control daemon answers at {where}", self.shared_pipe_directory)
            return GpuShare("off", share, f"no MPS control daemon at {where} (mps auto)")
        if mode == "off":
            return GpuShare("off", share, "mps off was asked for")
        if mode == "use":
            if not reachable:
                raise InvalidRequestError(
                    f"job spec: mps 'use' needs a running MPS control daemon, but none is at {where} "
                    f"({PIPE_ENV} of the daemon); start one, or submit with mps manage, auto or off"
                )
            return GpuShare("use", share, f"a control daemon answers at {where}", self.shared_pipe_directory)
        if shutil.which(MPS_CONTROL) is None:
            raise InvalidRequestError(
                f"job spec: mps 'manage' needs {MPS_CONTROL} on the daemon's PATH, and it is not there; install "
                "the NVIDIA driver's MPS tools, or submit with mps use, auto or off"
            )
        pipe = str(self.pipe_directory)
        return GpuShare("manage", share, f"the daemon's own control daemon, pipe directory {pipe}", pipe)

    # The managed control daemon's life

    def acquire(self, job_id: str, share: GpuShare) -> None:
        """Job `job_id` starts with `share`: a managed control daemon is started if it is not running."""
        if share.mode != "manage":
            return
        with self._lock:
            if not control_reachable(self.pipe_directory):
                self._start()
            self._users.add(job_id)

    def release(self, job_id: str) -> None:
        """Job `job_id` has ended; the managed control daemon stops when no job needs it."""
        with self._lock:
            if job_id not in self._users:
                return
            self._users.discard(job_id)
            if not self._users:
                self._stop("no job needs it")

    def close(self) -> None:
        """The daemon stops: so does its control daemon."""
        with self._lock:
            self._users.clear()
            self._stop("the daemon is stopping")

    def recover(self) -> None:
        """Stop a control daemon an earlier daemon of this runtime directory left running (it was
        killed before it could); called once at start."""
        with self._lock:
            if self.managed_dir.exists():
                self._stop("left by an earlier daemon of this runtime directory")

    @property
    def running(self) -> bool:
        return control_reachable(self.pipe_directory)

    def _env(self) -> dict[str, str]:
        return {**os.environ, PIPE_ENV: str(self.pipe_directory), LOG_ENV: str(self.log_directory)}

    def _control(self) -> str:
        binary = self._binary or shutil.which(MPS_CONTROL)
        if binary is None:
            raise InvalidRequestError(f"{MPS_CONTROL} is no longer on the daemon's PATH")
        self._binary = binary
        return binary

    def _start(self) -> None:
        for directory in (self.pipe_directory, self.log_directory):
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(
            [self._control(), "-d"], env=self._env(), check=True, timeout=START_TIMEOUT_S, capture_output=True
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not control_reachable(self.pipe_directory):
            if time.monotonic() > deadline:
                raise InvalidRequestError(
                    f"{MPS_CONTROL} -d did not open {self.pipe_directory}/{CONTROL_PIPE} within "
                    f"{START_TIMEOUT_S:g} s (its log: {self.log_directory})"
                )
            time.sleep(0.05)
        log.info("started the MPS control daemon (pipe %s, log %s)", self.pipe_directory, self.log_directory)

    def _pid(self) -> int | None:
        try:
            return int((self.pipe_directory / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def _ours(self, pid: int) -> bool:
        """True when process `pid` runs with this daemon's pipe directory (a reused pid is not killed)."""
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False
        return f"{PIPE_ENV}={self.pipe_directory}".encode() in environ

    def _stop(self, why: str) -> None:
        """Ask the managed control daemon to quit, wait for it, SIGKILL it past the timeout; then
        remove the managed directories."""
        pid = self._pid()
        if control_reachable(self.pipe_directory):
            with contextlib.suppress(OSError, subprocess.SubprocessError, InvalidRequestError):
                subprocess.run(
                    [self._control()], input=b"quit\n", env=self._env(), timeout=STOP_TIMEOUT_S, capture_output=True
                )
        if pid is not None and not _wait_gone(pid, STOP_TIMEOUT_S) and self._ours(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, STOP_TIMEOUT_S)
        if self.managed_dir.exists():
            shutil.rmtree(self.managed_dir, ignore_errors=True)
            log.info("stopped the MPS control daemon (%s)", why)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """True once process `pid` has exited (reaped, or a zombie of another parent) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
