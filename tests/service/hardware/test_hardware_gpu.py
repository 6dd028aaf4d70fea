"""On a CUDA machine: the doctor sees the devices and registers host memory; NVML's PCIe RX counter
grows by the bytes of a known pinned host-to-device copy. Skipped elsewhere, with the reason."""

from __future__ import annotations

import time

import pytest
import torch

from graphtier.service.hardware.doctor import build_report
from graphtier.service.hardware.nvml_collector import NvmlCollector
from graphtier.service.hardware.probe import probe_in_subprocess

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch")
COPY_BYTES = 1 << 30
COPIES = 3


@pytest.fixture(scope="module")
def report():
    return build_report("inprocess")


def test_doctor_sees_devices_with_free_memory_and_host_registration_works(report):
    assert report.cuda and report.summary.startswith(f"{len(report.devices)} CUDA device(s)")
    assert len(report.devices) >= 1 and all(d.free_memory_bytes > 0 for d in report.devices)
    visible = [d for d in report.devices if d.cuda_index is not None]
    assert len(visible) == torch.cuda.device_count(), report.devices  # every ordinal matched to its NVML device
    assert all(d.sm_count and d.compute_capability for d in visible)
    host = report.check("host_register")
    assert host.status == "ok", host.reason
    assert host.details["mapped_portable"]["view_data_ptr_equal"] is True
    assert host.details["mapped_portable"]["device_pointer_equal"] in (True, None), host.details
    n = torch.cuda.device_count()
    assert report.peer_access is not None and len(report.peer_access) == n
    assert report.check("peer_access").status in ("ok", "unavailable") and report.check("peer_access").reason
    for name in ("nvlink", "nvml_pcie_counters", "nvml_nvlink_counters"):
        assert report.check(name).status in ("ok", "unavailable"), report.check(name)


def test_the_daemon_probe_subprocess_agrees(report):
    probe = probe_in_subprocess(timeout_s=300)
    assert len(probe.devices) == torch.cuda.device_count()
    assert {c.name: c.status for c in probe.checks}["host_register"] == report.check("host_register").status


def test_pcie_rx_counter_grows_by_a_known_pinned_copy(report):
    (gpu0,) = [d.index for d in report.devices if d.cuda_index == 0]
    collector = NvmlCollector(interval_s=60)  # sampled by hand below, not by the thread
    collector.start()
    try:
        status = {g.gpu: g for g in collector.status().gpus}[gpu0]
        if status.method is None:
            assert status.unavailable_reason, status  # unsupported: it must say why
            pytest.skip(f"PCIe bytes not measurable on GPU {gpu0}: {status.unavailable_reason}")
        host = torch.empty(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
        device = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        collector.sample()
        before = {g.gpu: g for g in collector.status().gpus}[gpu0].pcie_rx_bytes
        for _ in range(COPIES):
            device.copy_(host, non_blocking=True)
            if status.method == "throughput":
                collector.sample()  # the estimate integrates KB/s samples: sample while bytes move
        torch.cuda.synchronize()
        time.sleep(0.5)  # let the driver's counters settle
        collector.sample()
        after = {g.gpu: g for g in collector.status().gpus}[gpu0].pcie_rx_bytes
    finally:
        collector.stop()
    ratio = (after - before) / (COPIES * COPY_BYTES)
    print(
        f"GPU {gpu0} ({status.method}): NVML RX {after - before} bytes for {COPIES * COPY_BYTES} copied, "
        f"ratio {ratio:.3f}"
    )
    if status.method == "field_values":
        assert 0.9 <= ratio <= 1.3, f"measured/copied = {ratio:.3f}"
    else:
        assert ratio >= 0, f"throughput estimate ratio {ratio:.3f}"
