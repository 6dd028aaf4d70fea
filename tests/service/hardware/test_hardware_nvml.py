"""NVML where it is missing (this CPU machine): clean reasons, no measured metric, no thread."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from graphtier.service.hardware import nvml
from graphtier.service.hardware.nvml_collector import NvmlCollector


def _nvml_works() -> bool:
    try:
        with nvml.session():
            return True
    except nvml.NvmlUnavailable:
        return False


no_nvml = pytest.mark.skipif(_nvml_works(), reason="NVML works on this machine (see test_hardware_gpu.py)")


def test_nvidia_ml_py_is_installed():
    pynvml = nvml.load()  # a declared dependency: it must import everywhere, with or without a driver
    assert (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES) == (
        nvml.FIELD_PCIE_TX_BYTES, nvml.FIELD_PCIE_RX_BYTES)  # fmt: skip
    assert (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) == (
        nvml.FIELD_NVLINK_TX_KIB, nvml.FIELD_NVLINK_RX_KIB)  # fmt: skip


@no_nvml
def test_session_fails_cleanly_with_the_reason():
    with pytest.raises(nvml.NvmlUnavailable) as info:
        with nvml.session():
            pass
    assert str(info.value).startswith("NVML: ") and "NVMLError_" in str(info.value)


@no_nvml
def test_collector_without_nvml_exports_nothing_and_says_why():
    before = {t.ident for t in threading.enumerate()}
    collector = NvmlCollector(interval_s=0.1)
    collector.start()
    try:
        assert collector.thread is None and {t.ident for t in threading.enumerate()} == before
        status = collector.status()
        assert not status.enabled and status.gpus == [] and status.samples == 0
        assert status.reason and status.reason.startswith("NVML: ") and status.pcie_rx_bytes is None
        registry = CollectorRegistry()
        registry.register(collector)
        assert b"measured" not in generate_latest(registry)
    finally:
        collector.stop()


def test_collector_disabled_by_interval_zero():
    collector = NvmlCollector(interval_s=0)
    collector.start()
    assert collector.thread is None
    assert collector.status().reason == "disabled: nvml_interval_s is 0" and not collector.status().enabled
    assert list(collector.collect()) == []
    collector.stop()
    collector.stop()  # idempotent
