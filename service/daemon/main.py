"""`graphtierd`: the command that runs the daemon until SIGTERM or SIGINT.

The config is validated and the runtime directory's lock taken before the heavy imports
(torch, grpc), so a second daemon is refused in a fraction of a second. Signals only set
an event; the main thread then stops the daemon in order (see `server.Daemon.stop`).
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import NoReturn

from graphtier.contract.endpoints import daemon_file_dir
from graphtier.contract.errors import DaemonAlreadyRunningError, DaemonConfigError, DaemonError
from graphtier.contract.processes import exit_without_teardown
from graphtier.service.daemon.cli_help import HelpStyledParser
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.instance import InstanceLock
from graphtier.service.daemon.systemd import SystemdNotifier

SCRATCH_DIR = "tmp"  # the daemon's temporary directory, inside its runtime directory
SCRATCH_MARK = ".graphtierd-scratch"  # in a scratch directory the daemon made: only such a one is ever removed

EXIT_CONFIG = 2
EXIT_RUNNING = 3
EXIT_FAILED = 1


def build_parser() -> argparse.ArgumentParser:
    parser = HelpStyledParser(prog="graphtierd", description="The graphtier daemon: datasets, jobs, metrics.")
    parser.add_argument("--config", type=Path, help="YAML or JSON DaemonConfig file; flags override it")
    parser.add_argument(
        "--runtime-dir", type=Path, help="lock, socket, endpoints.json and log (default $GRAPHTIER_HOME/run)"
    )
    parser.add_argument("--socket", type=Path, dest="socket_path", help="gRPC Unix socket path")
    parser.add_argument("--tcp", help="also serve gRPC on HOST:PORT (port 0 = a free one)")
    parser.add_argument(
        "--http-host",
        help="status app address (default 127.0.0.1: this machine only). The page, /v1/status and /metrics have no "
        "authentication and show dataset paths, job names and specs to whoever reaches them: bind another address "
        "only where just your monitoring does",
    )
    parser.add_argument("--http-port", type=int, help="status app port (default 0 = a free one)")
    parser.add_argument("--dataset-root", type=Path, help="prepared datasets (default $GRAPHTIER_HOME/datasets)")
    parser.add_argument("--log-file", type=Path, help="log file (default <runtime-dir>/daemon.log)")
    parser.add_argument("--grpc-workers", type=int, help="threads serving gRPC calls other than followed event streams")
    parser.add_argument(
        "--max-event-streams",
        type=int,
        help="followed job event streams (job logs --follow) open at once, each in its own thread (default 256)",
    )
    parser.add_argument(
        "--producer-stall-timeout",
        type=float,
        dest="producer_stall_timeout_s",
        help="seconds without a producer heartbeat before its job fails (default 60)",
    )
    parser.add_argument(
        "--nvml-interval",
        type=float,
        dest="nvml_interval_s",
        help="seconds between NVML samples of PCIe/NVLink byte counters (default 1; 0 = off)",
    )
    parser.add_argument(
        "--cuda-probe-timeout",
        type=float,
        dest="cuda_probe_timeout_s",
        help="seconds the start-up CUDA probe subprocess may take (default 120; 0 = skip it)",
    )
    parser.add_argument(
        "--max-running-jobs",
        type=int,
        dest="max_running_jobs",
        help="jobs running at once (default 0: as many as fit cores, memory and GPUs; others queue)",
    )
    parser.add_argument(
        "--memory-limit",
        help="memory the daemon and its jobs may use: auto (its memory cgroup's limit, the default), none, or a "
        "size such as 8GiB; a job that cannot fit is refused at submit",
    )
    parser.add_argument(
        "--core-oversubscription", type=float, help="ranks per CPU core the running jobs may have together (default 2)"
    )
    parser.add_argument(
        "--keep-checkpoints",
        action="store_true",
        default=None,
        help="keep every job's checkpoints (default: none after success, the newest otherwise)",
    )
    parser.add_argument(
        "--job-retire",
        type=float,
        dest="job_retire_s",
        help="seconds after a job ends before its per-job metrics are folded away (default 600)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="job history across restarts (default <runtime-dir>/../state-<name>, ../state for run)",
    )
    parser.add_argument(
        "--idle-unload",
        type=float,
        dest="idle_unload_s",
        help="unload a dataset unused by any job for this many seconds (default 0 = never)",
    )
    parser.add_argument(
        "--shm-budget",
        help="shared memory all loaded datasets may hold, e.g. 40GiB or 80%% "
        "(default 90%% of /dev/shm); idle datasets make room, least recently used first",
    )
    parser.add_argument(
        "--socket-group", help="Unix group allowed to call the daemon (socket 0660); default: owner only"
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="serve --tcp in plaintext (the token is still required); default: TLS only",
    )
    parser.add_argument("--tls-cert", type=Path, help="TLS certificate for --tcp (default: self-signed, made once)")
    parser.add_argument("--tls-key", type=Path, help="private key of --tls-cert")
    parser.add_argument(
        "--token-file", type=Path, help="bearer token TCP callers must send (default <runtime-dir>/token)"
    )
    parser.add_argument(
        "--gpu-tiers",
        choices=("auto", "off"),
        help="auto (default): device tiers in GPU memory when GPUs are visible; off: accounted only",
    )
    parser.add_argument(
        "--device-budget",
        help="device-tier bytes per GPU, e.g. 24GiB or 50%% (default auto: free memory less --device-reserve)",
    )
    parser.add_argument(
        "--device-reserve", help="with --device-budget auto: GPU memory left for training (default 25%%)"
    )
    parser.add_argument(
        "--device-memory",
        choices=("ipc", "vmm"),
        help="how device tiers and slots are shared: ipc (default; CUDA IPC handles, one PID namespace) or vmm "
        "(CUDA VMM fds passed over a Unix socket; works across PID namespaces)",
    )
    parser.add_argument(
        "--peer",
        action="append",
        dest="cluster_peers",
        metavar="HOST:PORT",
        help="another daemon of the cluster (its --tcp address); repeat for each",
    )
    parser.add_argument(
        "--peers-file",
        type=Path,
        dest="cluster_peers_file",
        help="hosts file: one HOST:PORT per line, '#' comments; this node's own line is skipped",
    )
    parser.add_argument(
        "--node-name", dest="cluster_node_name", help="this node's name in the cluster (default its address)"
    )
    parser.add_argument(
        "--advertise",
        dest="cluster_advertise",
        metavar="HOST:PORT",
        help="the address peers reach this daemon at (default the --tcp address)",
    )
    parser.add_argument(
        "--peer-ca",
        type=Path,
        dest="cluster_peer_ca",
        help="PEM certificate(s) to trust for peers' TLS (default this daemon's own certificate)",
    )
    parser.add_argument(
        "--peer-timeout",
        type=float,
        dest="cluster_peer_timeout_s",
        help="seconds a peer may not answer before a job spanning it fails (default 15)",
    )
    parser.add_argument(
        "--print-files",
        action="store_true",
        help="check the config and flags, print where this daemon keeps its files (JSON) and exit",
    )
    return parser


def _same_file(stream: object, path: Path) -> bool:
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)  # type: ignore[attr-defined]
    except (OSError, AttributeError, ValueError):
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def setup_logging(config: DaemonConfig) -> None:
    """Log to stderr, and to the log file unless stderr already is that file (`cluster start`)."""
    daemon_file_dir(config.log_path.parent, config.runtime_dir, config.socket_gid)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if not _same_file(sys.stderr, config.log_path):
        handlers.append(logging.FileHandler(config.log_path))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s", handlers=handlers
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    overrides = {key: value for key, value in vars(args).items() if key not in ("config", "print_files")}
    try:
        config = DaemonConfig.build(args.config, **overrides)
    except DaemonConfigError as exc:
        print(f"graphtierd: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if args.print_files:
        print(config.files().model_dump_json(indent=2))
        return 0
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    lock = InstanceLock(config)
    try:
        stale = lock.acquire()
    except DaemonAlreadyRunningError as exc:
        print(f"graphtierd: error: {exc}", file=sys.stderr)
        return EXIT_RUNNING
    except DaemonError as exc:
        print(f"graphtierd: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    setup_logging(config)
    log = logging.getLogger("graphtierd")
    for path in stale:
        log.info("removed stale %s left by a daemon that died", path)
    try:
        private_scratch_dir(config.runtime_dir, log)
    except DaemonError as exc:
        lock.release()
        print(f"graphtierd: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        from graphtier.service.daemon.server import Daemon  # heavy: torch, grpc, fastapi

        daemon = Daemon(config, lock=lock)
        endpoints = daemon.start()
    except BaseException as exc:
        lock.release()
        if isinstance(exc, DaemonError):
            log.error("cannot start: %s", exc)
            return EXIT_FAILED
        log.exception("cannot start")
        return EXIT_FAILED
    try:
        notifier = SystemdNotifier()
        notifier.ready(f"serving gRPC on {endpoints.grpc_target}, HTTP on {endpoints.http_url}")
        while not stop.wait(notifier.tick_s):
            notifier.tick()
            if not lock.still_held():  # its socket and lock are gone with the directory: it would run on unreachable
                log.error(
                    "the runtime directory %s was removed or replaced: nothing can reach or stop this daemon "
                    "any more, so it stops",
                    config.runtime_dir,
                )
                break
        else:
            log.info("stopping on a signal")
        notifier.stopping()
    finally:
        daemon.stop()
    return 0


def run() -> NoReturn:
    """The `graphtierd` process: `main()`, then an exit without the interpreter's teardown (the
    daemon has let go of all it owns; `graphtier cluster stop` waits for the process to end)."""
    exit_without_teardown(main())


def private_scratch_dir(runtime_dir: Path, log: logging.Logger) -> Path:
    """`<runtime_dir>/tmp`, emptied, as this process's and its children's temporary directory:
    multiprocessing's pymp-* and torchrun's files then live (and die) with the daemon, and what a
    daemon killed with -9 left there is removed by the next one instead of staying in /tmp forever.
    A `tmp` the daemon did not make (no SCRATCH_MARK inside: a user's, in a runtime directory given
    as a home) is never removed: DaemonError naming it."""
    scratch = runtime_dir / SCRATCH_DIR
    if scratch.exists() or scratch.is_symlink():
        if scratch.is_symlink() or not (scratch / SCRATCH_MARK).is_file():
            raise DaemonError(
                f"{scratch} exists and is not a scratch directory graphtierd made; nothing was removed: give the "
                "daemon a runtime directory of its own (--runtime-dir) or move it away"
            )
        log.info("removed stale %s left by a daemon that died", scratch)
        shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700)
    (scratch / SCRATCH_MARK).touch()
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)
    # Removed at exit, after multiprocessing's own clean-up of its pymp-* there: atexit runs last
    # what was registered first, and multiprocessing registers its handler when first imported, later.
    atexit.register(shutil.rmtree, scratch, True)
    return scratch
