"""NVML access through nvidia-ml-py (`pynvml`): device facts and hardware byte counters.

NVML talks to the driver without creating a CUDA context, so it is safe in the daemon
before it forks. Every function here takes the `pynvml` module of an open `session()`;
`NvmlUnavailable` carries the reason when NVML cannot be used at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from graphtier.contract.machine import GpuDevice

FIELD_PCIE_TX_BYTES = 197  # NVML_FI_DEV_PCIE_COUNT_TX_BYTES: cumulative, driver >= 555
FIELD_PCIE_RX_BYTES = 198  # NVML_FI_DEV_PCIE_COUNT_RX_BYTES
FIELD_NVLINK_TX_KIB = 138  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: cumulative KiB, scopeId = link
FIELD_NVLINK_RX_KIB = 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"

_FRIENDLY = {
    "NVMLError_LibraryNotFound": "libnvidia-ml.so.1 cannot be loaded: no NVIDIA driver installed",
    "NVMLError_DriverNotLoaded": "the NVIDIA kernel driver is not loaded",
    "NVMLError_NoPermission": "not permitted to talk to the NVIDIA driver",
}


class NvmlUnavailable(Exception):
    """NVML cannot be used in this process; the message says why."""


def load() -> ModuleType:
    """The `pynvml` module; NvmlUnavailable when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py is not installed ({exc}); pip install nvidia-ml-py") from None
    return pynvml


def describe(exc: BaseException) -> str:
    """An NVML error as one line: its message and its class, with what it means where known."""
    kind = type(exc).__name__
    return f"{_FRIENDLY.get(kind, exc)} ({kind})"


def return_text(nv: ModuleType, code: int) -> str:
    """'Not Supported (return 3)' for an NVML return code."""
    try:
        name = _text(nv.nvmlErrorString(code))
    except Exception:  # an unknown code: the number alone still says what happened
        name = "unknown NVML return"
    return f"{name} (return {code})"


@contextlib.contextmanager
def session() -> Iterator[ModuleType]:
    """`nvmlInit` ... `nvmlShutdown` (NVML counts references, so sessions may nest or overlap)."""
    nv = load()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise NvmlUnavailable(f"NVML: {describe(exc)}") from None
    try:
        yield nv
    finally:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def kernel_driver() -> str | None:
    """The loaded NVIDIA kernel driver's version line, None when no driver is loaded."""
    try:
        with open(DRIVER_VERSION_FILE) as f:
            return f.readline().strip() or None
    except OSError:
        return None


def driver_versions(nv: ModuleType) -> tuple[str | None, str | None]:
    """(driver version, CUDA version the driver supports as 'major.minor')."""
    driver = cuda = None
    with contextlib.suppress(nv.NVMLError):
        driver = _text(nv.nvmlSystemGetDriverVersion())
    with contextlib.suppress(nv.NVMLError):
        number = int(nv.nvmlSystemGetCudaDriverVersion())
        cuda = f"{number // 1000}.{number % 1000 // 10}"
    return driver, cuda


@dataclass(frozen=True)
class Gpu:
    """A device handle with its NVML index and facts."""

    index: int
    handle: Any
    device: GpuDevice


def gpus(nv: ModuleType) -> list[Gpu]:
    """Every GPU NVML sees, in NVML (PCI) order; raises NVMLError when enumeration itself fails."""
    found = []
    for index in range(nv.nvmlDeviceGetCount()):
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        memory = nv.nvmlDeviceGetMemoryInfo(handle)
        capability = None
        with contextlib.suppress(nv.NVMLError):
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
            capability = f"{major}.{minor}"
        device = GpuDevice(
            index=index,
            cuda_index=None,
            name=_text(nv.nvmlDeviceGetName(handle)),
            uuid=_text(nv.nvmlDeviceGetUUID(handle)),
            pci_bus_id=_text(nv.nvmlDeviceGetPciInfo(handle).busId),
            total_memory_bytes=int(memory.total),
            free_memory_bytes=int(memory.free),
            compute_capability=capability,
            sm_count=None,
        )
        found.append(Gpu(index, handle, device))
    return found


# nvmlValueType_t -> the member of the nvmlValue_t union that holds a value of that type
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class NvmlValueTypeError(ValueError):
    """An NVML field value of a type this module cannot read."""


def field_value(field: Any) -> int | float:
    """The value of one `nvmlFieldValue_t`, read from the union member its `valueType` names: a
    double as float, every integer type as int. Reading `ullVal` whatever the type would turn a
    double's bits or a 32-bit value's neighbouring bytes into a count."""
    kind = int(field.valueType)
    member = _VALUE_MEMBERS.get(kind)
    if member is None:
        raise NvmlValueTypeError(
            f"NVML field {int(field.fieldId)} has value type {kind}, "
            f"not one of {sorted(_VALUE_MEMBERS)} (nvmlValueType_t)"
        )
    value = getattr(field.value, member)
    return float(value) if kind == 0 else int(value)


def read_fields(
    nv: ModuleType, handle: Any, fields: Sequence[int | tuple[int, int]]
) -> list[tuple[int, int | float | None]]:
    """(NVML return code, value by its type or None) per field id (or (field id, scope id)); raises
    NVMLError when the call as a whole fails (e.g. a driver without nvmlDeviceGetFieldValues)."""
    values = nv.nvmlDeviceGetFieldValues(handle, list(fields))
    out: list[tuple[int, int | float | None]] = []
    for field in values:
        code = int(field.nvmlReturn)
        out.append((code, field_value(field) if code == 0 else None))
    return out


def active_nvlinks(nv: ModuleType, handle: Any) -> tuple[list[int], str | None]:
    """(active link indices, why there are none); links past the device's count answer an error."""
    active, first_error = [], None
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = nv.nvmlDeviceGetNvLinkState(handle, link)
        except nv.NVMLError as exc:
            first_error = first_error or describe(exc)
            if link == 0:  # no NVLink at all (Not Supported), not one link past the device's count
                break
            continue
        if state == nv.NVML_FEATURE_ENABLED:
            active.append(link)
    return active, None if active else f"no active NVLink link (NVML: {first_error or 'every link is down'})"


def nvlink_remote(nv: ModuleType, handle: Any, link: int) -> str | None:
    """The PCI bus id at the far end of `link` (a peer GPU or an NVSwitch), None when unreadable."""
    try:
        return _text(nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
    except nv.NVMLError:
        return None


def pcie_counters(nv: ModuleType, handle: Any) -> tuple[str | None, str]:
    """How this GPU's PCIe bytes can be measured: ('field_values' | 'throughput' | None, what NVML said)."""
    try:
        codes = [code for code, _ in read_fields(nv, handle, [FIELD_PCIE_TX_BYTES, FIELD_PCIE_RX_BYTES])]
        fields = "; ".join(f"{d} bytes field: {return_text(nv, c)}" for d, c in zip(("TX", "RX"), codes, strict=True))
    except nv.NVMLError as exc:
        codes, fields = [-1], f"nvmlDeviceGetFieldValues: {describe(exc)}"
    if all(code == 0 for code in codes):
        return "field_values", f"byte counters read ({fields})"
    try:
        for counter in (nv.NVML_PCIE_UTIL_TX_BYTES, nv.NVML_PCIE_UTIL_RX_BYTES):
            nv.nvmlDeviceGetPcieThroughput(handle, counter)
    except nv.NVMLError as exc:
        return None, f"{fields}; throughput fallback: {describe(exc)}"
    return "throughput", f"{fields}; throughput API (KB/s) reads: estimates only"


def nvlink_counters(nv: ModuleType, handle: Any, links: Sequence[int]) -> tuple[list[int], str | None]:
    """(links whose data TX/RX KiB counters read, why some or all do not)."""
    if not links:
        return [], "no active NVLink link"
    try:
        got = read_fields(nv, handle, [(f, link) for link in links for f in (FIELD_NVLINK_TX_KIB, FIELD_NVLINK_RX_KIB)])
    except nv.NVMLError as exc:
        return [], f"nvmlDeviceGetFieldValues: {describe(exc)}"
    readable = [link for k, link in enumerate(links) if got[2 * k][0] == 0 and got[2 * k + 1][0] == 0]
    failed = [(link, got[2 * k][0] or got[2 * k + 1][0]) for k, link in enumerate(links) if link not in readable]
    why = "; ".join(f"link {link}: {return_text(nv, code)}" for link, code in failed)
    return readable, why or None
