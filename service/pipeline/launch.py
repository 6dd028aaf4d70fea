"""Starting a producer process and waiting, with a timeout, until its channel is open.

The daemon (and the tests) call `spawn_producer(config)`: it forks a producer from the warm
forkserver (forkserver.py) with stdout and stderr sent to `<channel_dir>/producer.log`,
receives the one handshake message (the path of its layout.json) over a pipe, and returns a
`ProducerProcess` with the `ChannelLayout` to hand to the trainer rank. A producer that exits
or stays silent during start-up is an error quoting the end of its log.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from pathlib import Path

from graphtier.contract.processes import run_as_job_work
from graphtier.service.pipeline.config import ProducerConfig
from graphtier.service.pipeline.control import ChannelStats, ControlBlock
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.forkserver import ForkedProcess, redirect_output
from graphtier.service.pipeline.layout import ChannelLayout
from graphtier.service.pipeline.slots import attach_control

LOG_FILE = "producer.log"


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class ProducerProcess:
    """A running producer: its process, its channel layout and its log."""

    def __init__(self, process: ForkedProcess, layout: ChannelLayout, log_path: Path) -> None:
        self.process = process
        self.layout = layout
        self.log_path = log_path
        # Mapped now, read-only: the last counters stay readable after the producer exits.
        self._control: ControlBlock = attach_control(layout.control, layout.error_text, writable=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        """The exit status (negative: killed by that signal), or None while it runs."""
        return self.process.poll()

    def stats(self) -> ChannelStats:
        """The channel's counters, read from its control block."""
        return self._control.stats()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM (the producer cleans up and exits 0), then SIGKILL after `timeout` seconds."""
        return self.process.stop(timeout)

    def log(self) -> str:
        return _log_tail(self.log_path, 10_000)

    def __enter__(self) -> ProducerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _forked_producer(config_json: str, ready: Connection, log_path: str, env: dict[str, str]) -> None:
    """The producer's entry point in the forked child: log to the file, then serve the channel."""
    from graphtier.service.pipeline.producer import run_producer  # preloaded by the forkserver: no import cost

    redirect_output(log_path)
    config = ProducerConfig.model_validate_json(config_json)
    if config.demote:
        run_as_job_work()  # job work yields to the daemon's control plane when cores are short
    os.environ.update(env)

    def announce(layout_path: Path) -> None:
        ready.send(str(layout_path))
        ready.close()

    sys.exit(run_producer(config, announce))


def spawn_producer(
    config: ProducerConfig, *, startup_timeout: float = 120.0, env: Mapping[str, str] | None = None
) -> ProducerProcess:
    """Start a producer for `config` and return once a consumer may connect to it.

    `env` is set in the producer's environment; OpenMP settings among it take no effect
    (OpenMP was loaded by the forkserver): `config.num_threads` sets the thread count.
    """
    channel_dir = Path(config.channel_dir)
    channel_dir.mkdir(parents=True, exist_ok=True)
    log_path = channel_dir / LOG_FILE
    reader, writer = multiprocessing.Pipe(duplex=False)  # the server is started once, by ForkedProcess
    process: ForkedProcess | None = None
    try:
        process = ForkedProcess(
            _forked_producer,
            (config.model_dump_json(), writer, str(log_path), dict(env or {})),
            name=f"graphtier-producer-{config.channel_name}",
        )
        writer.close()
        deadline = time.monotonic() + startup_timeout
        while not reader.poll():
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelError(
                    f"producer pid {process.pid} of channel {config.channel_name!r} did not open its channel within "
                    f"{startup_timeout:g} s; log {log_path}:\n{_log_tail(log_path)}"
                )
            wait([reader, process.sentinel], left)
        try:
            layout_file = reader.recv()
        except EOFError:
            code = process.stop(0.0)
            raise ChannelError(
                f"producer of channel {config.channel_name!r} exited with status {code} during start-up; "
                f"log {log_path}:\n{_log_tail(log_path)}"
            ) from None
        layout = ChannelLayout.read(Path(layout_file).parent)
        if layout.producer_pid != process.pid:
            raise ChannelError(f"{channel_dir}: layout.json belongs to pid {layout.producer_pid}, not {process.pid}")
        return ProducerProcess(process, layout, log_path)
    except BaseException:
        if process is not None:
            process.stop(0.0)
        raise
    finally:
        writer.close()
        reader.close()
