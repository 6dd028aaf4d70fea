"""Starting a producer process and waiting, with a timeout, until its channel is open.

The daemon (and the tests) call `spawn_producer(config)`: it runs
`python -m graphtier.service.pipeline.producer --config JSON`, sends its stderr to
`<channel_dir>/producer.log`, reads the one handshake line from its stdout, and returns a
`ProducerProcess` with the `ChannelLayout` to hand to the trainer rank. A producer that
exits or stays silent during start-up is an error quoting the end of its log.
"""

from __future__ import annotations

import contextlib
import selectors
import subprocess
import sys
import time
from pathlib import Path

from graphtier.service.pipeline.config import ProducerConfig
from graphtier.service.pipeline.control import ChannelStats, ControlBlock
from graphtier.service.pipeline.errors import ChannelError
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

    def __init__(self, popen: subprocess.Popen[bytes], layout: ChannelLayout, log_path: Path) -> None:
        self.popen = popen
        self.layout = layout
        self.log_path = log_path
        # Mapped now, read-only: the last counters stay readable after the producer exits.
        self._control: ControlBlock = attach_control(layout.control, layout.error_text, writable=False)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def stats(self) -> ChannelStats:
        """The channel's counters, read from its control block."""
        return self._control.stats()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM (the producer cleans up and exits 0), then SIGKILL after `timeout` seconds."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                return self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        return self.popen.wait()

    def log(self) -> str:
        return _log_tail(self.log_path, 10_000)

    def __enter__(self) -> ProducerProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def spawn_producer(
    config: ProducerConfig, *, startup_timeout: float = 120.0, env: dict[str, str] | None = None
) -> ProducerProcess:
    """Start a producer for `config` and return once a consumer may connect to it."""
    channel_dir = Path(config.channel_dir)
    channel_dir.mkdir(parents=True, exist_ok=True)
    log_path = channel_dir / LOG_FILE
    command = [sys.executable, "-m", "graphtier.service.pipeline.producer", "--config", config.model_dump_json()]
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env)
    assert popen.stdout is not None  # stdout=PIPE
    line = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(popen.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + startup_timeout
            while not line.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise ChannelError(
                        f"producer pid {popen.pid} of channel {config.channel_name!r} did not open its channel within "
                        f"{startup_timeout:g} s; log {log_path}:\n{_log_tail(log_path)}"
                    )
                chunk = popen.stdout.read1(4096)  # type: ignore[attr-defined]
                if not chunk:
                    code = popen.wait()
                    raise ChannelError(
                        f"producer of channel {config.channel_name!r} exited with status {code} during start-up; "
                        f"log {log_path}:\n{_log_tail(log_path)}"
                    )
                line += chunk
        layout = ChannelLayout.read(Path(line.decode().strip()).parent)
        if layout.producer_pid != popen.pid:
            raise ChannelError(f"{channel_dir}: layout.json belongs to pid {layout.producer_pid}, not {popen.pid}")
        process = ProducerProcess(popen, layout, log_path)
    except BaseException:
        with contextlib.suppress(OSError):
            popen.kill()
        popen.wait()
        raise
    finally:
        popen.stdout.close()
    return process
