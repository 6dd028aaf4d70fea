"""Checked calls into the CUDA runtime through cuda-python (`cuda.bindings.runtime`).

cuda-python is NVIDIA's maintained binding of the runtime and driver APIs: it gives the
calls torch does not expose (IPC handles, host registration with flags, PCI bus ids) without
a compiled extension of ours. It uses the same primary context per device as torch, so
pointers from either are interchangeable. Every failure raises `CudaError` naming the call,
the error and what it was for.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

from graphtier.contract.errors import GraphtierError


class CudaError(GraphtierError):
    """A CUDA runtime call failed, or CUDA is not usable on this machine."""


_state: dict[str, Any] = {}


def cudart() -> Any:
    """The `cuda.bindings.runtime` module; CudaError when cuda-python is not installed."""
    if "rt" not in _state:
        try:
            _state["rt"] = importlib.import_module("cuda.bindings.runtime")
        except ImportError as exc:
            raise CudaError(
                f"cuda-python is not installed ({exc}); install `cuda-bindings` to use the GPU tiers"
            ) from None
    return _state["rt"]


def check(result: Any, what: str) -> Any:
    """Unpack a cuda-python result `(err, *values)`: the value(s), or CudaError naming `what`."""
    rt = cudart()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != rt.cudaError_t.cudaSuccess:
        _, name = rt.cudaGetErrorName(err)
        _, text = rt.cudaGetErrorString(err)
        raise CudaError(f"{what}: {name.decode()} ({text.decode()})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def driver() -> Any:
    """The `cuda.bindings.driver` module, imported (not initialised: `cuInit` is the caller's);
    CudaError when cuda-python is not installed."""
    if "driver" not in _state:
        try:
            _state["driver"] = importlib.import_module("cuda.bindings.driver")
        except ImportError as exc:
            raise CudaError(
                f"cuda-python is not installed ({exc}); install `cuda-bindings` to use the GPU tiers"
            ) from None
    return _state["driver"]


def driver_error_name(err: Any) -> str:
    """A driver result's own name and text ("CUDA_ERROR_INVALID_VALUE (invalid argument)"): the name
    from the `CUresult` enum, which needs no driver, the text from the driver where it can be asked."""
    d = driver()
    try:
        name = d.CUresult(int(err)).name
    except ValueError:
        name = f"CUresult {int(err)}"
    try:
        found, text = d.cuGetErrorString(err)
        if found != d.CUresult.CUDA_SUCCESS:
            return name
    except RuntimeError:  # no driver library to ask: the name alone
        return name
    return f"{name} ({text.decode() if isinstance(text, bytes) else text})"


def check_driver(result: Any, what: str) -> Any:
    """Unpack a driver API result `(CUresult, *values)`: the value(s), or CudaError naming `what` and
    the driver's error by its driver name (`check` names runtime errors by theirs)."""
    d = driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != d.CUresult.CUDA_SUCCESS:
        raise CudaError(f"{what}: {driver_error_name(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def device_count() -> tuple[int, str]:
    """(CUDA devices visible to this process, why none when 0). Initialises the driver only."""
    try:
        rt = cudart()
    except CudaError as exc:
        return 0, str(exc)
    err, count = rt.cudaGetDeviceCount()
    if err != rt.cudaError_t.cudaSuccess:
        _, text = rt.cudaGetErrorString(err)
        return 0, f"cudaGetDeviceCount: {text.decode()}"
    return int(count), "" if count else "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)"


def set_device(device: int) -> None:
    check(cudart().cudaSetDevice(device), f"cudaSetDevice({device})")


def _initialised_driver() -> Any:
    """`cuda.bindings.driver` after cuInit; CudaError when the driver library cannot be loaded (no
    NVIDIA driver: cuda-python raises its own RuntimeError) or initialised."""
    d = driver()
    try:
        result = d.cuInit(0)
    except RuntimeError as exc:
        raise CudaError(f"the CUDA driver cannot be used ({type(exc).__name__}: {exc})") from None
    check_driver(result, "cuInit")
    return d


@contextlib.contextmanager
def on_device(device: int) -> Iterator[None]:
    """Make `device` current for the block, then restore the thread's previous context (maybe none):
    torch reads the current device from the same runtime state, so it must not change behind its back."""
    d = _initialised_driver()
    previous = check_driver(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
    set_device(device)
    try:
        yield
    finally:
        d.cuCtxSetCurrent(previous)


def read_only_registration_supported(device: int) -> bool:
    """Whether `device` can register read-only host memory (cudaDevAttrHostRegisterReadOnlySupported)."""
    rt = cudart()
    attr = rt.cudaDeviceAttr.cudaDevAttrHostRegisterReadOnlySupported
    return bool(
        check(rt.cudaDeviceGetAttribute(attr, device), f"read-only host registration attribute of GPU {device}")
    )


def pci_bus_id(device: int) -> str:
    """The device's PCI bus id ("0000:18:00.0"): the same GPU under any CUDA_VISIBLE_DEVICES."""
    raw = check(cudart().cudaDeviceGetPCIBusId(32, device), f"cudaDeviceGetPCIBusId({device})")
    text = raw.decode(errors="replace") if isinstance(raw, (bytes, bytearray)) else str(raw)
    return text.split("\x00", 1)[0].strip()


def device_of_pci_bus_id(bus_id: str) -> int:
    """This process's ordinal of the GPU at `bus_id`; CudaError when it is not visible here."""
    return int(check(cudart().cudaDeviceGetByPCIBusId(bus_id.encode()), f"GPU {bus_id} is not visible here"))


def can_access_peer(device: int, peer: int) -> bool:
    return bool(check(cudart().cudaDeviceCanAccessPeer(device, peer), f"cudaDeviceCanAccessPeer({device}, {peer})"))


def mem_get_info(device: int) -> tuple[int, int]:
    """(free, total) bytes of `device` (creates its primary context)."""
    with on_device(device):
        free, total = check(cudart().cudaMemGetInfo(), f"cudaMemGetInfo on device {device}")
    return int(free), int(total)
