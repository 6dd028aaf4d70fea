"""The producer's end of the channel socket: the one consumer, and which slots it has given back.

Slots move FREE -> FILLING -> READY (producer) -> HELD (consumer) -> FREE (the producer, on
the consumer's "release k"). The producer only ever fills a slot taken from the free list
here, so a slot the consumer holds is never overwritten. Every wait beats the heartbeat and
ends when the consumer goes away (ConnectionClosed), so a dead consumer cannot wedge it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from graphtier.service.pipeline.control import ControlBlock, ProducerStatus, SlotState
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.notify import ConnectionClosed, Listener, MessageSocket


class ConsumerLink:
    """Accepts the consumer, tracks free slots, and relays messages (see module docstring)."""

    def __init__(
        self,
        listener: Listener,
        control: ControlBlock,
        *,
        channel: str,
        heartbeat_s: float,
        on_release: Callable[[int], None] | None = None,
    ) -> None:
        """`on_release(k)`: called when the consumer gives slot k back, before k is free again."""
        self._on_release = on_release
        self._listener = listener
        self._control = control
        self._channel = channel
        self._heartbeat_s = heartbeat_s
        self._conn: MessageSocket | None = None
        self._free: deque[int] = deque(range(len(control.slots)))

    @property
    def socket_path(self) -> str:
        return self._listener.path

    @property
    def all_free(self) -> bool:
        return len(self._free) == len(self._control.slots)

    def accept(self, timeout: float) -> None:
        """Wait up to `timeout` s for the consumer and its hello; then stop listening (one consumer)."""
        ctl = self._control
        ctl.status = ProducerStatus.WAITING_FOR_CONSUMER
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            conn = self._listener.accept(min(left, self._heartbeat_s))
            ctl.beat()
            if conn is None:
                continue
            self._listener.close()
            hello = conn.recv(max(deadline - time.monotonic(), self._heartbeat_s))
            if hello is None or hello.get("kind") != "hello":
                conn.close()
                raise ChannelError(f"the consumer of channel {self._channel!r} sent {hello!r} instead of hello")
            ctl.header["consumer_pid"] = int(hello.get("pid", 0))
            self._conn = conn
            return
        raise ChannelError(f"no consumer connected to {self._listener.path} within {timeout:g} s")

    def send(self, message: dict[str, object]) -> None:
        if self._conn is None:
            raise ChannelError(f"channel {self._channel!r} has no consumer yet")
        self._conn.send(message)

    def try_send(self, message: dict[str, object]) -> None:
        """Send if a consumer listens; a closed socket is not an error here (used on failure)."""
        if self._conn is not None:
            try:
                self._conn.send(message)
            except (ConnectionClosed, OSError):
                pass

    def poll(self, timeout: float) -> None:
        """Handle the consumer's messages: wait up to `timeout` s for one, then take all that are pending."""
        if self._conn is None:
            raise ChannelError(f"channel {self._channel!r} has no consumer yet")
        message = self._conn.recv(timeout)
        while message is not None:
            kind = message["kind"]
            if kind == "bye":
                raise ConnectionClosed("the consumer said bye")
            if kind != "release":
                raise ChannelError(f"unexpected message {message!r} from the consumer of channel {self._channel!r}")
            k = message.get("slot")
            if not isinstance(k, int) or not 0 <= k < len(self._control.slots) or k in self._free:
                raise ChannelError(
                    f"the consumer of channel {self._channel!r} released slot {k!r}, which it does not hold"
                )
            if self._on_release is not None:
                self._on_release(k)
            self._control.slots[k]["state"] = SlotState.FREE
            self._free.append(k)
            message = self._conn.recv(0)
        self._control.beat()

    def acquire(self) -> int:
        """A FREE slot, waiting (with heartbeats) for the consumer to release one if none is."""
        ctl = self._control
        self.poll(0)
        if not self._free:
            ctl.status = ProducerStatus.WAITING_FOR_SLOT
            start = time.monotonic_ns()
            while not self._free:
                self.poll(self._heartbeat_s)
            ctl.header["producer_wait_ns"] += time.monotonic_ns() - start
            ctl.status = ProducerStatus.RUNNING
        return self._free.popleft()

    def drain(self) -> None:
        """Wait until the consumer has released every slot (or left)."""
        while not self.all_free:
            self.poll(self._heartbeat_s)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._listener.close()
