"""How a slot's memory accesses are ordered between the producer and the rank.

The slot protocol is one for every job: states in the control block, "ready k" / "release k"
on the channel socket, stall and crash detection (control.py, notify.py, consumer_link.py,
reader.py). What differs is what makes the *data* visible once a message arrives:

- `HostOrdering` (host slots): nothing more. The producer's writes are done when it sends
  "ready", and a socket system call is a full memory barrier.
- `CudaEventOrdering` (device slots): the writes are kernels still queued on the producer's
  stream when "ready" is sent. Each slot has two interprocess CUDA events (created by the
  producer with cudaEventInterprocess | cudaEventDisableTiming, opened by the rank from their
  IPC handles): the producer records "ready" after its gather and the rank's stream waits on it
  before the batch is read; the rank records "released" after its step and the producer's
  stream waits on it before the slot is refilled. Nobody blocks a CPU thread on the GPU.

The producer calls `after_fill` before sending "ready" and `before_fill` when it takes a slot;
the rank calls `before_read` when a batch arrives and `after_read` before sending "release".
"""

from __future__ import annotations

import ctypes
from abc import ABC, abstractmethod
from typing import Any

IPC_EVENT_HANDLE_BYTES = 64


class SlotOrdering(ABC):
    """One side's ordering of every slot of a channel (see the module docstring)."""

    kind: str

    @abstractmethod
    def before_fill(self, slot: int) -> None:
        """Producer, slot taken from the free list: its next writes come after the rank's reads."""

    @abstractmethod
    def after_fill(self, slot: int) -> None:
        """Producer, writes enqueued, before "ready" is sent: mark them for the rank."""

    @abstractmethod
    def before_read(self, slot: int) -> None:
        """Rank, "ready" received: its reads come after the producer's writes."""

    @abstractmethod
    def after_read(self, slot: int) -> None:
        """Rank, before "release" is sent: mark its reads done for the producer."""

    def event_handles(self, slot: int) -> tuple[str, str] | None:
        """The (ready, released) IPC event handles of `slot` as hex for its layout; None for host slots."""
        return None

    def close(self) -> None:  # noqa: B027 -- a default: host ordering holds nothing
        """Destroy or close the events this side holds; idempotent."""


class HostOrdering(SlotOrdering):
    """Host slots: the socket message orders everything (a system call is a full barrier)."""

    kind = "host"

    def before_fill(self, slot: int) -> None:
        """Nothing to wait for: the rank's "release" message came after its last read."""

    def after_fill(self, slot: int) -> None:
        """Nothing to mark: the writes are done when "ready" is sent."""

    def before_read(self, slot: int) -> None:
        """Nothing to wait for: the "ready" message came after the producer's last write."""

    def after_read(self, slot: int) -> None:
        """Nothing to mark: the reads are done when "release" is sent."""


def _event_bytes(handle: Any) -> bytes:
    return ctypes.string_at(handle.getPtr(), IPC_EVENT_HANDLE_BYTES)


def _event_handle(rt: Any, text: str) -> Any:
    raw = bytes.fromhex(text)
    if len(raw) != IPC_EVENT_HANDLE_BYTES:
        from graphtier.service.gpu.runtime import CudaError

        raise CudaError(f"a CUDA IPC event handle is {IPC_EVENT_HANDLE_BYTES} bytes, got {len(raw)}")
    handle = rt.cudaIpcEventHandle_t()
    ctypes.memmove(handle.getPtr(), raw, IPC_EVENT_HANDLE_BYTES)
    return handle


class CudaEventOrdering(SlotOrdering):
    """Device slots on GPU `device`: per slot a "ready" and a "released" interprocess event, waited
    on and recorded on this process's current stream of that GPU (see the module docstring).

    `create(device, num_slots)` is the producer's side (it owns and destroys the events);
    `open(device, handles)` the rank's (it opens the producer's handles).
    """

    kind = "cuda_events"

    def __init__(self, device: int, ready: list[Any], released: list[Any], *, owned: bool) -> None:
        self.device = device
        self._ready, self._released, self._owned = ready, released, owned

    @classmethod
    def create(cls, device: int, num_slots: int) -> CudaEventOrdering:
        from graphtier.service.gpu.runtime import check, cudart, on_device

        rt = cudart()
        flags = rt.cudaEventInterprocess | rt.cudaEventDisableTiming
        ready: list[Any] = []
        released: list[Any] = []
        ordering = cls(device, ready, released, owned=True)
        try:
            with on_device(device):
                for k in range(num_slots):
                    ready.append(check(rt.cudaEventCreateWithFlags(flags), f"ready event of slot {k} on GPU {device}"))
                    released.append(
                        check(rt.cudaEventCreateWithFlags(flags), f"released event of slot {k} on GPU {device}")
                    )
        except BaseException:
            ordering.close()
            raise
        return ordering

    @classmethod
    def open(cls, device: int, handles: list[tuple[str, str]]) -> CudaEventOrdering:
        from graphtier.service.gpu.runtime import check, cudart, on_device

        rt = cudart()
        ready: list[Any] = []
        released: list[Any] = []
        ordering = cls(device, ready, released, owned=False)
        try:
            with on_device(device):
                for k, (ready_hex, released_hex) in enumerate(handles):
                    what = f"cudaIpcOpenEventHandle of slot {k} on GPU {device} (is the producer alive?)"
                    ready.append(check(rt.cudaIpcOpenEventHandle(_event_handle(rt, ready_hex)), what))
                    released.append(check(rt.cudaIpcOpenEventHandle(_event_handle(rt, released_hex)), what))
        except BaseException:
            ordering.close()
            raise
        return ordering

    def event_handles(self, slot: int) -> tuple[str, str]:
        from graphtier.service.gpu.runtime import check, cudart

        rt = cudart()
        pair = []
        for event in (self._ready[slot], self._released[slot]):
            pair.append(_event_bytes(check(rt.cudaIpcGetEventHandle(event), f"cudaIpcGetEventHandle of slot {slot}")))
        return pair[0].hex(), pair[1].hex()

    def _stream(self) -> Any:
        import torch

        from graphtier.service.gpu.runtime import cudart

        return cudart().cudaStream_t(torch.cuda.current_stream(self.device).cuda_stream)

    def _record(self, event: Any, what: str) -> None:
        from graphtier.service.gpu.runtime import check, cudart, on_device

        with on_device(self.device):  # the event's device, whatever this thread had current
            check(cudart().cudaEventRecord(event, self._stream()), what)

    def _wait(self, event: Any, what: str) -> None:
        from graphtier.service.gpu.runtime import check, cudart, on_device

        with on_device(self.device):
            check(cudart().cudaStreamWaitEvent(self._stream(), event, 0), what)

    def before_fill(self, slot: int) -> None:
        self._wait(self._released[slot], f"waiting for the rank to release slot {slot}")

    def after_fill(self, slot: int) -> None:
        self._record(self._ready[slot], f"recording slot {slot} ready")

    def before_read(self, slot: int) -> None:
        self._wait(self._ready[slot], f"waiting for slot {slot} to be filled")

    def after_read(self, slot: int) -> None:
        self._record(self._released[slot], f"recording slot {slot} released")

    def close(self) -> None:
        """Destroy the events (both sides: an opened IPC event is destroyed like any other)."""
        from graphtier.service.gpu.runtime import cudart

        events, self._ready, self._released = [*self._ready, *self._released], [], []
        if not events:
            return
        rt = cudart()
        for event in events:
            rt.cudaEventDestroy(event)


def slot_ordering(layout_events: list[tuple[str, str] | None], device: int | None) -> SlotOrdering:
    """The rank's ordering for a channel whose slots carry `layout_events`: host when they carry none."""
    if all(pair is None for pair in layout_events):
        return HostOrdering()
    if device is None or any(pair is None for pair in layout_events):
        from graphtier.service.pipeline.errors import ChannelError

        raise ChannelError("a channel mixes device and host slots, or its device slots have no GPU here")
    return CudaEventOrdering.open(device, [pair for pair in layout_events if pair is not None])
