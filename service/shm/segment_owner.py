"""The one process that creates shared-memory segments and is responsible for unlinking them.

A `SegmentOwner` unlinks every segment it created when it is closed, garbage-collected, at
interpreter exit, and on SIGTERM/SIGINT (when created in the main thread of a process that
left those signals at their default handlers; the owner then chains to that default, so the
process still dies or raises KeyboardInterrupt). A kill -9 cannot be caught: the next owner
reclaims what it left (`reclaim_stale_segments`). A forked child inherits the owner object
but never unlinks its parent's segments.

Closing never invalidates live tensors: it unlinks the files and drops the owner's mappings;
the kernel unmaps each segment when its last view is garbage, and frees the memory then.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import threading
import weakref
from collections.abc import Sequence
from types import FrameType
from typing import Any

import torch

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.shm.naming import (
    SegmentName,
    process_start_time,
    segment_path,
    token_namespace,
    validate_label,
)
from graphtier.service.shm.reclaim import reclaim_stale_segments
from graphtier.service.shm.ref import dtype_name, torch_dtype
from graphtier.service.shm.segment import SharedSegment, create_segment

_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_DEFAULT_HANDLERS: dict[int, Any] = {signal.SIGTERM: signal.SIG_DFL, signal.SIGINT: signal.default_int_handler}

_lock = threading.RLock()  # re-entrant: a signal handler may run while the main thread holds it
_open_states: dict[int, _OwnerState] = {}
_installed: dict[int, Any] = {}  # signal -> the default handler ours replaced


class _OwnerState:
    """What cleanup needs, kept apart from the owner so finalizers do not keep it alive."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.names: list[str] = []  # recorded before the file exists, removed after it is unlinked
        self.segments: dict[str, SharedSegment] = {}
        self.closed = False

    def unlink(self, name: str) -> None:
        # Idempotent, so a signal arriving mid-close can finish what the interrupted close began.
        if os.getpid() == self.pid:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(segment_path(name))
        with contextlib.suppress(ValueError):
            self.names.remove(name)

    def close(self) -> None:
        with _lock:
            self.closed = True
            for name in list(self.names):
                self.unlink(name)
            self.segments.clear()
            _open_states.pop(id(self), None)
            if not _open_states:
                _uninstall_signal_handlers()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    """Unlink every open owner's segments, then do what the process would have done anyway."""
    with _lock:
        for state in list(_open_states.values()):
            if state.pid == os.getpid():
                state.close()
        previous = _installed.pop(signum, _DEFAULT_HANDLERS[signum])
    if callable(previous):
        previous(signum, frame)
    else:
        signal.signal(signum, previous)
        os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in _HANDLED_SIGNALS:
        if signum in _installed:
            continue
        current = signal.getsignal(signum)
        if current is _DEFAULT_HANDLERS[signum]:
            signal.signal(signum, _on_signal)
            _installed[signum] = current


def _uninstall_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in list(_installed):
        if signal.getsignal(signum) is _on_signal:  # leave a handler someone set after ours alone
            signal.signal(signum, _installed[signum])
        del _installed[signum]


class SegmentOwner:
    """Creates named segments and unlinks all of them on close, exit, or SIGTERM/SIGINT.

    Creating an owner first reclaims stale segments of dead owners (`reclaimed` lists them).
    Use as a context manager or call `close()`.
    """

    def __init__(self) -> None:
        self.reclaimed: list[str] = reclaim_stale_segments()
        pid = os.getpid()
        start_time = process_start_time(pid)
        if start_time is None:
            raise SharedMemoryError(f"cannot read the start time of this process from /proc/{pid}/stat")
        self._pid = pid
        self._start_time = start_time
        self._token = token_namespace() + secrets.token_hex(4)
        self._state = _OwnerState()
        with _lock:
            _open_states[id(self._state)] = self._state
            _install_signal_handlers()
        self._finalizer = weakref.finalize(self, self._state.close)

    def __enter__(self) -> SegmentOwner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SegmentOwner(pid={self._pid}, token={self._token!r}, segments={len(self._state.segments)})"

    @property
    def closed(self) -> bool:
        return self._state.closed

    @property
    def segments(self) -> dict[str, SharedSegment]:
        """The open segments by label."""
        return dict(self._state.segments)

    def segment_name(self, label: str) -> str:
        """The /dev/shm file name this owner gives the segment labelled `label`."""
        return str(SegmentName(self._pid, self._start_time, self._token, validate_label(label)))

    def create(self, label: str, nbytes: int) -> SharedSegment:
        """Create and map a new segment of `nbytes` bytes; labels are unique per owner."""
        if self._state.closed:
            raise SharedMemoryError(f"cannot create segment {label!r}: the owner is closed")
        if os.getpid() != self._pid:
            raise SharedMemoryError(
                f"cannot create segment {label!r}: this owner belongs to parent process {self._pid}"
            )
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise SharedMemoryError(f"segment {label!r}: size {nbytes!r} must be a non-negative integer of bytes")
        name = self.segment_name(label)
        with _lock:
            if label in self._state.segments or name in self._state.names:
                raise SharedMemoryError(f"this owner already has a segment labelled {label!r}")
            self._state.names.append(name)
            try:
                segment = create_segment(name, label, nbytes)
            except BaseException:
                self._state.unlink(name)
                raise
            self._state.segments[label] = segment
        return segment

    def create_tensor(
        self, label: str, shape: Sequence[int], dtype: torch.dtype | str
    ) -> tuple[SharedSegment, torch.Tensor]:
        """Create a segment sized for one C-contiguous tensor; return it and the (zeroed) tensor."""
        dt = torch_dtype(dtype_name(dtype))
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            raise SharedMemoryError(f"segment {label!r}: shape {dims} has a negative dimension")
        nbytes = dt.itemsize
        for d in dims:
            nbytes *= d
        segment = self.create(label, nbytes)
        return segment, segment.view(dims, dt)

    def remove(self, label: str) -> None:
        """Unlink one segment now (its live views stay valid until they are dropped)."""
        with _lock:
            segment = self._state.segments.pop(label, None)
            if segment is None:
                raise SharedMemoryError(f"this owner has no segment labelled {label!r}")
            self._state.unlink(segment.name)

    def close(self) -> None:
        """Unlink every segment this owner created; idempotent."""
        self._finalizer()


def open_owner_count() -> int:
    """How many owners in this process are open (for diagnostics and tests)."""
    with _lock:
        return len(_open_states)
