"""`NvmlCollector`: the bytes the hardware moved, sampled from NVML about once a second.

Per GPU: PCIe TX/RX from the driver's cumulative byte counters (field values 197/198), or,
where those are unsupported, the throughput API's KB/s integrated over each interval (an
estimate, and `/v1/status` says so); NVLink data TX/RX per active link (fields 138/139,
scope = link, KiB). Exported as Prometheus counters beside the software-accounted bytes:

    graphtier_pcie_measured_tx_bytes_total{gpu}    graphtier_pcie_measured_rx_bytes_total{gpu}
    graphtier_nvlink_measured_tx_bytes_total{gpu,link}    ..._rx_bytes_total{gpu,link}

A GPU or link that cannot be measured has no series; `status()` says why. Nothing here is
ever fatal to the daemon, and `stop()` joins the sampling thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import ModuleType
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from graphtier.contract.machine import GpuTraffic, LinkTraffic, MeasuredTraffic
from graphtier.service.hardware import nvml

log = logging.getLogger("graphtierd.nvml")
KIB = 1024


@dataclass
class _Gpu:
    index: int
    name: str
    handle: Any
    method: str | None
    reason: str | None
    links: list[int]
    links_reason: str | None
    tx: int = 0
    rx: int = 0
    last: tuple[int, int] | None = None  # the previous cumulative PCIe reading (field_values)
    link_tx: dict[int, int] = field(default_factory=dict)
    link_rx: dict[int, int] = field(default_factory=dict)
    link_last: dict[int, tuple[int, int]] = field(default_factory=dict)
    error: str | None = None


def _grow(total: int, previous: int | None, now: int) -> int:
    """Add a cumulative counter's increase; a counter that went back (driver reset) adds nothing."""
    return total + max(0, now - previous) if previous is not None else total


class NvmlCollector(Collector):
    """Samples every `interval_s` seconds on its own thread; `interval_s == 0` disables it."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self._nv: ModuleType | None = None
        self._gpus: list[_Gpu] = []
        self._reason: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples = 0
        self._last_at: datetime | None = None
        self._last_mono = 0.0

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def start(self) -> None:
        """Find what can be measured, take the baseline reading, start the thread (when anything can)."""
        if self.interval_s <= 0:
            self._reason = "disabled: nvml_interval_s is 0"
            return
        try:
            nv = nvml.load()
        except nvml.NvmlUnavailable as exc:
            self._reason = str(exc)
            return
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            self._reason = f"NVML: {nvml.describe(exc)}"
            return
        self._nv = nv
        try:
            self._gpus = [self._inspect(nv, gpu) for gpu in nvml.gpus(nv)]
        except nv.NVMLError as exc:
            self._reason = f"NVML cannot enumerate devices: {nvml.describe(exc)}"
        except Exception as exc:  # never fatal to the daemon: say what broke instead
            self._gpus, self._reason = [], f"NVML inspection failed: {type(exc).__name__}: {exc}"
        if not self._gpus and self._reason is None:
            self._reason = "NVML sees no GPU"
        if not any(g.method or g.links for g in self._gpus):
            self._reason = self._reason or "no GPU's PCIe or NVLink bytes can be measured (see each GPU)"
            self._shutdown()
            return
        self.sample()  # the baseline: counters count from here
        self._thread = threading.Thread(target=self._run, name="graphtier-nvml", daemon=True)
        self._thread.start()

    def _inspect(self, nv: ModuleType, gpu: nvml.Gpu) -> _Gpu:
        method, said = nvml.pcie_counters(nv, gpu.handle)
        active, no_links = nvml.active_nvlinks(nv, gpu.handle)
        readable, why = nvml.nvlink_counters(nv, gpu.handle, active)
        return _Gpu(gpu.index, gpu.device.name, gpu.handle, method, None if method else said, readable, no_links or why)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except Exception:  # never fatal; logged so a broken driver is visible
                log.exception("NVML sampling failed")

    def sample(self) -> None:
        """Read every measured counter once and add what moved since the previous reading."""
        nv = self._nv
        if nv is None:
            return
        now = time.monotonic()
        with self._lock:
            dt = now - self._last_mono if self._samples else 0.0
            for gpu in self._gpus:
                try:
                    self._sample_gpu(nv, gpu, dt)
                    gpu.error = None
                except nv.NVMLError as exc:
                    if gpu.error is None:
                        log.warning("NVML: GPU %d: cannot read its counters: %s", gpu.index, nvml.describe(exc))
                    gpu.error = nvml.describe(exc)
            self._samples += 1
            self._last_mono = now
            self._last_at = datetime.now(timezone.utc)

    def _sample_gpu(self, nv: ModuleType, gpu: _Gpu, dt: float) -> None:
        if gpu.method == "field_values":
            (c1, tx), (c2, rx) = nvml.read_fields(nv, gpu.handle, [nvml.FIELD_PCIE_TX_BYTES, nvml.FIELD_PCIE_RX_BYTES])
            if c1 == 0 and c2 == 0 and tx is not None and rx is not None:
                tx, rx = int(tx), int(rx)  # byte counts: NVML gives these fields as integers
                gpu.tx = _grow(gpu.tx, gpu.last and gpu.last[0], tx)
                gpu.rx = _grow(gpu.rx, gpu.last and gpu.last[1], rx)
                gpu.last = (tx, rx)
        elif gpu.method == "throughput" and dt > 0:
            gpu.tx += int(nv.nvmlDeviceGetPcieThroughput(gpu.handle, nv.NVML_PCIE_UTIL_TX_BYTES) * KIB * dt)
            gpu.rx += int(nv.nvmlDeviceGetPcieThroughput(gpu.handle, nv.NVML_PCIE_UTIL_RX_BYTES) * KIB * dt)
        if not gpu.links:
            return
        ids = [(f, link) for link in gpu.links for f in (nvml.FIELD_NVLINK_TX_KIB, nvml.FIELD_NVLINK_RX_KIB)]
        got = nvml.read_fields(nv, gpu.handle, ids)
        for k, link in enumerate(gpu.links):
            (c1, tx), (c2, rx) = got[2 * k], got[2 * k + 1]
            if c1 or c2 or tx is None or rx is None:
                continue
            tx, rx = int(tx), int(rx)  # KiB counts: NVML gives these fields as integers
            previous = gpu.link_last.get(link)
            gpu.link_tx[link] = _grow(gpu.link_tx.get(link, 0), previous and previous[0] * KIB, tx * KIB)
            gpu.link_rx[link] = _grow(gpu.link_rx.get(link, 0), previous and previous[1] * KIB, rx * KIB)
            gpu.link_last[link] = (tx, rx)

    def stop(self) -> None:
        """Stop sampling, join the thread, release NVML; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            if self._thread.is_alive():
                log.warning("the NVML sampling thread did not stop within 10 s")
        self._shutdown()

    def _shutdown(self) -> None:
        nv, self._nv = self._nv, None
        if nv is not None:
            try:
                nv.nvmlShutdown()
            except nv.NVMLError as exc:
                log.warning("NVML shutdown: %s", nvml.describe(exc))

    def status(self) -> MeasuredTraffic:
        """What `/v1/status` carries: per GPU totals and method, or why nothing is measured."""
        with self._lock:
            gpus = [
                GpuTraffic(
                    gpu=g.index,
                    name=g.name,
                    method=g.method,
                    pcie_tx_bytes=g.tx if g.method else None,
                    pcie_rx_bytes=g.rx if g.method else None,
                    unavailable_reason=g.reason if g.method is None else g.error,
                    nvlink=[
                        LinkTraffic(link=k, tx_bytes=g.link_tx.get(k, 0), rx_bytes=g.link_rx.get(k, 0)) for k in g.links
                    ],
                    nvlink_unavailable_reason=g.links_reason,
                )
                for g in self._gpus
            ]
            return MeasuredTraffic(
                enabled=self._thread is not None,
                interval_s=self.interval_s,
                reason=self._reason,
                samples=self._samples,
                last_sample_at=self._last_at,
                gpus=gpus,
            )

    def describe(self) -> Iterable[Any]:
        return []  # series come and go with what NVML can measure; nothing to reserve

    def collect(self) -> Iterable[CounterMetricFamily]:
        families = []
        with self._lock:
            pcie = [g for g in self._gpus if g.method]
            links = [(g, k) for g in self._gpus for k in g.links]
            for direction, what in (("tx", "device to host"), ("rx", "host to device")):
                if pcie:
                    family = CounterMetricFamily(
                        f"graphtier_pcie_measured_{direction}_bytes",
                        f"PCIe bytes {what} as NVML counts them (all of the GPU's traffic, not only graphtier's).",
                        labels=("gpu",),
                        unit="bytes",
                    )
                    for g in pcie:
                        family.add_metric((str(g.index),), g.tx if direction == "tx" else g.rx)
                    families.append(family)
                if links:
                    family = CounterMetricFamily(
                        f"graphtier_nvlink_measured_{direction}_bytes",
                        f"NVLink data bytes ({direction}) per link as NVML counts them.",
                        labels=("gpu", "link"),
                        unit="bytes",
                    )
                    for g, k in links:
                        family.add_metric(
                            (str(g.index), str(k)), (g.link_tx if direction == "tx" else g.link_rx).get(k, 0)
                        )
                    families.append(family)
        return families
