"""systemd's readiness protocol (sd_notify): READY once gRPC and HTTP serve, a watchdog ping,
STOPPING while draining. A unit with `Type=notify` then orders what comes after the daemon
after it is really serving, and restarts it if the main loop stops answering.

The protocol is one datagram per state on the Unix socket named by $NOTIFY_SOCKET (a leading
'@' is the abstract namespace); outside systemd the variable is unset and nothing is sent.
"""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("graphtierd")


class SystemdNotifier:
    """Sends states to systemd when run under it (NOTIFY_SOCKET set); a no-op otherwise."""

    def __init__(self) -> None:
        self.address = os.environ.get("NOTIFY_SOCKET") or None
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and (not pid or pid == str(os.getpid())) else 0.0
        self._last_ping = 0.0

    def send(self, state: str) -> None:
        """One datagram, never blocking: a Unix datagram socket whose reader lags holds only
        net.unix.max_dgram_qlen of them (10 by default), and a blocking send then waits for the
        reader, which would stop the daemon's main loop (and its shutdown) behind a listener."""
        if self.address is None:
            return
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK) as sock:
                sock.sendto(state.encode(), target)
        except OSError as exc:  # systemd gone, the socket unreachable or its queue full: never fatal
            log.warning("sd_notify %r to %s failed: %s", state.split("\n", 1)[0], self.address, exc)

    def ready(self, status: str) -> None:
        self.send(f"READY=1\nSTATUS={status}\nMAINPID={os.getpid()}")

    def stopping(self) -> None:
        self.send("STOPPING=1\nSTATUS=draining calls, stopping jobs, unlinking segments")

    def tick(self) -> None:
        """Called from the main loop: pings the watchdog twice per interval."""
        if self.watchdog_s and time.monotonic() - self._last_ping >= self.watchdog_s / 2:
            self._last_ping = time.monotonic()
            self.send("WATCHDOG=1")

    @property
    def tick_s(self) -> float:
        """How often the main loop must call `tick` (1 s, or faster for a short watchdog)."""
        return min(1.0, self.watchdog_s / 4) if self.watchdog_s else 1.0
