"""`graphtierd`: the command that runs the daemon until SIGTERM or SIGINT.

Its options are `DaemonConfig`'s fields, derived in typer as the `graphtier` commands' are
(`graphtier.contract.command_line`); flags win over the `--config` file. The config is validated
and the runtime directory's lock taken before the heavy imports (torch, grpc), so a second daemon
is refused in a fraction of a second. Signals only set an event; the main thread then stops the
daemon in order (see `server.Daemon.stop`).
"""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Any, NoReturn, TextIO, cast

import typer
from typer.core import TyperCommand

from graphtier.contract.command_line import FlagTyper, GivenOptions, with_model_options
from graphtier.contract.endpoints import daemon_file_dir
from graphtier.contract.errors import DaemonAlreadyRunningError, DaemonConfigError, DaemonError
from graphtier.contract.identity import identity_socket_path
from graphtier.contract.processes import exit_without_teardown
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.instance import InstanceLock
from graphtier.service.daemon.reaper import SCRATCH_MARK, kill_left, mark_scratch, stand_down, start_reaper
from graphtier.service.daemon.systemd import SystemdNotifier

SCRATCH_DIR = "tmp"  # the daemon's temporary directory, inside its runtime directory

EXIT_CONFIG = 2
EXIT_RUNNING = 3
EXIT_FAILED = 1


app = FlagTyper(add_completion=False, pretty_exceptions_enable=False)


@app.command()
@with_model_options(DaemonConfig)
def graphtierd(
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML or JSON DaemonConfig file; flags override it.")
    ] = None,
    print_files: Annotated[
        bool,
        typer.Option(
            "--print-files", help="Check the config and flags, print where this daemon keeps its files (JSON) and exit."
        ),
    ] = False,
    *,
    given: GivenOptions,
) -> None:
    """The graphtier daemon: datasets, jobs, metrics."""
    raise typer.Exit(serve(config, given.values(), print_files=print_files))


def command_line() -> TyperCommand:
    """graphtierd's command: DaemonConfig's fields as options (graphtier.contract.command_line)."""
    return cast(TyperCommand, typer.main.get_command(app))


def _same_file(stream: TextIO, path: Path) -> bool:
    try:
        a, b = os.fstat(stream.fileno()), os.stat(path)
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
    """Run graphtierd with `argv` (default sys.argv[1:]); its exit status. --help and usage errors are
    answered as typer answers the graphtier commands' (status 2 for a usage error)."""
    try:
        command_line().main(args=argv, prog_name="graphtierd")
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else EXIT_FAILED
    return 0


def serve(source: Path | None, flags: dict[str, Any], *, print_files: bool = False) -> int:
    """Validate the config (file `source`, then `flags`), take the runtime directory and run the daemon
    until SIGTERM or SIGINT; with `print_files`, print where it keeps its files instead. The exit status."""
    try:
        config = DaemonConfig.build(source, **flags)
    except DaemonConfigError as exc:
        print(f"graphtierd: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if print_files:
        print(config.files().model_dump_json(indent=2))
        return 0
    if problem := config.forkserver_room():
        print(f"graphtierd: error: {problem}", file=sys.stderr)
        return EXIT_CONFIG
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
        scratch = private_scratch_dir(config.runtime_dir, log)
    except DaemonError as exc:
        lock.release()
        print(f"graphtierd: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    # before torch and any thread: what a kill -9 leaves is removed by the process this forks
    reaper = start_reaper(config.runtime_dir, scratch, (config.socket, identity_socket_path(config.socket)))
    try:
        from graphtier.service.daemon.server import Daemon  # heavy: torch, grpc, fastapi

        daemon = Daemon(config, lock=lock)
        endpoints = daemon.start()
    except BaseException as exc:
        lock.release()
        stop_forkserver()
        stand_down(reaper)
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
        stop_forkserver()  # waited for: nothing of the daemon outlives it
        stand_down(reaper)  # everything is removed (the scratch directory at exit, below)
    return 0


def stop_forkserver() -> None:
    """Stop the forkserver the daemon's children were forked from, and wait for it to exit (nothing of a
    stopped daemon outlives it); a daemon that never started one has nothing to stop."""
    if "graphtier.service.pipeline.forkserver" in sys.modules:
        from graphtier.service.pipeline.forkserver import stop_forkserver as stop

        stop()


def run() -> NoReturn:
    """The `graphtierd` process: `main()`, then an exit without the interpreter's teardown (the
    daemon has let go of all it owns; `graphtier cluster stop` waits for the process to end)."""
    exit_without_teardown(main())


def private_scratch_dir(runtime_dir: Path, log: logging.Logger) -> Path:
    """`<runtime_dir>/tmp`, emptied, as this process's and its children's temporary directory:
    multiprocessing's pymp-* and torchrun's files then live (and die) with the daemon; what a daemon
    killed with -9 left there is removed by its reaper (reaper.py), or else by the next daemon, instead
    of staying in /tmp forever. The next daemon also kills what of the dead one still runs (its reaper
    leaves that to a daemon started before its wait was over).
    A `tmp` the daemon did not make (no SCRATCH_MARK inside: a user's, in a runtime directory given
    as a home) is never removed: DaemonError naming it."""
    scratch = runtime_dir / SCRATCH_DIR
    if scratch.exists() or scratch.is_symlink():
        if scratch.is_symlink() or not (scratch / SCRATCH_MARK).is_file():
            raise DaemonError(
                f"{scratch} exists and is not a scratch directory graphtierd made; nothing was removed: give the "
                "daemon a runtime directory of its own (--runtime-dir) or move it away"
            )
        killed = kill_left(scratch)  # under this daemon's lock, before it starts anything: a dead daemon's
        log.info("removed stale %s left by a daemon that died (and %d of its processes)", scratch, len(killed))
        shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o700)
    mark_scratch(scratch)
    os.environ["TMPDIR"] = str(scratch)
    tempfile.tempdir = str(scratch)
    # Removed at exit, after multiprocessing's own clean-up of its pymp-* there, whatever the order the
    # modules were imported in: a finalizer of lower priority than that clean-up's (-100) runs after it
    # (an atexit handler ran before it whenever multiprocessing had been imported first, as torch does,
    # and every exit logged a FileNotFoundError for the pymp-* directory already removed). A forked
    # child runs no finalizer of its parent's.
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(str(scratch), True), exitpriority=-200)
    return scratch
