"""`MachineFacts`: the daemon's `MachineReport`, computed once at start without initialising CUDA.

The NVML and file-system checks run in the daemon (fork-safe); the CUDA checks run in a
short subprocess on a background thread, so start-up does not wait for a torch import and
CUDA initialisation. Until it answers, those checks say `pending`. Every check is logged
once, one line each.
"""

from __future__ import annotations

import logging
import threading

from graphtier.contract.machine import MachineReport
from graphtier.service.hardware.doctor import build_report, log_lines, with_probe
from graphtier.service.hardware.probe import probe_in_subprocess

log = logging.getLogger("graphtierd.machine")


class MachineFacts:
    """Holds the report; `probe_timeout_s == 0` skips the CUDA probe (`graphtier doctor` runs it)."""

    def __init__(self, probe_timeout_s: float) -> None:
        self.probe_timeout_s = probe_timeout_s
        self._report: MachineReport | None = None
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def report(self) -> MachineReport:
        with self._lock:
            if self._report is None:
                raise RuntimeError("MachineFacts.start() has not run")
            return self._report

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def start(self) -> MachineReport:
        """The NVML and host checks now (logged); the CUDA probe in the background where there are GPUs."""
        report = build_report("pending" if self.probe_timeout_s > 0 else "skip")
        with self._lock:
            self._report = report
        for line in log_lines(report):
            log.info("%s", line)
        if report.cuda and self.probe_timeout_s > 0:
            self._thread = threading.Thread(target=self._probe, name="graphtier-cuda-probe", daemon=True)
            self._thread.start()
        return report

    def _probe(self) -> None:
        try:
            probe = probe_in_subprocess(self.probe_timeout_s, self._cancel)
        except Exception:  # never fatal: the report keeps saying pending, the log says why
            log.exception("the CUDA probe failed")
            return
        if self._cancel.is_set():
            return
        with self._lock:
            assert self._report is not None
            self._report = with_probe(self._report, probe)
            report = self._report
        for check in report.checks:
            if check.name in {c.name for c in probe.checks} or check.name == "cuda_devices":
                log.info("machine: %s %s: %s", check.name, check.status, check.reason)

    def stop(self) -> None:
        """Kill a probe still running and join its thread; idempotent."""
        self._cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
