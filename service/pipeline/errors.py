"""Errors of a producer channel, each naming the producer pid and the channel."""

from __future__ import annotations

from graphtier.contract.errors import GraphtierError


class ChannelError(GraphtierError):
    """A producer channel cannot be opened or used (bad layout, socket, protocol)."""


class ProducerError(ChannelError):
    """Base of the errors a consumer sees when its producer stops serving batches."""

    def __init__(self, message: str, *, pid: int, channel: str) -> None:
        self.pid = pid
        self.channel = channel
        super().__init__(message)


class ProducerDiedError(ProducerError):
    """The producer process is gone (killed, crashed) before it finished the data."""


class ProducerStalledError(ProducerError):
    """The producer is alive but has shown no sign of progress for longer than the timeout."""


class ProducerFailedError(ProducerError):
    """The producer hit an error, reported it in the control block and exited."""
