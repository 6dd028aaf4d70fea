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
        nvml.FIELD_PCIE_TX_BYTES,
        nvml.FIELD_PCIE_RX_BYTES,
    )
    assert (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX) == (
        nvml.FIELD_NVLINK_TX_KIB,
        nvml.FIELD_NVLINK_RX_KIB,
    )


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


def _field(value_type: int, member: str, value: float, field_id: int = nvml.FIELD_PCIE_RX_BYTES):
    """A real `nvmlFieldValue_t` (pynvml's ctypes struct) as nvmlDeviceGetFieldValues fills it."""
    field = nvml.load().c_nvmlFieldValue_t()
    field.fieldId, field.valueType, field.nvmlReturn = field_id, value_type, 0
    setattr(field.value, member, value)
    return field


@pytest.mark.parametrize(
    ("type_name", "member", "value"),
    [
        ("NVML_VALUE_TYPE_DOUBLE", "dVal", 1.5),
        ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal", 2**32 - 1),
        ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal", 2**40 + 3),
        ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal", 2**63 + 5),
        ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal", -(2**40)),
        ("NVML_VALUE_TYPE_SIGNED_INT", "siVal", -7),
        ("NVML_VALUE_TYPE_UNSIGNED_SHORT", "usVal", 65535),
    ],
)
def test_field_value_is_read_by_its_value_type(type_name, member, value):
    field = _field(getattr(nvml.load(), type_name), member, value)
    got = nvml.field_value(field)
    assert got == value and type(got) is type(value)


def test_a_double_or_a_signed_value_is_not_read_as_unsigned_long_long():
    pynvml = nvml.load()
    double = _field(pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 1.5)
    negative = _field(pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -1)
    # what reading ullVal whatever the type gave: the double's bits, the int's upper bytes as a count
    assert double.value.ullVal == 0x3FF8000000000000 and negative.value.ullVal == 2**32 - 1
    assert nvml.field_value(double) == 1.5 and nvml.field_value(negative) == -1


def test_unknown_value_type_is_an_error_naming_the_field():
    field = _field(nvml.load().NVML_VALUE_TYPE_COUNT, "ullVal", 1, field_id=nvml.FIELD_PCIE_TX_BYTES)
    with pytest.raises(nvml.NvmlValueTypeError, match=f"NVML field {nvml.FIELD_PCIE_TX_BYTES} has value type 7"):
        nvml.field_value(field)
