"""`ChannelLoader`: a torchrun rank's mini-batches, straight out of its producer's ping-pong slots.

The rank asks the daemon for its channel (OpenChannel), attaches the slots with a
`ChannelReader` and iterates its `Batch`es: blocks, features and labels are zero-copy
views of the slot, valid until `release()`. Works with any `torch.nn.Module` taking
`(blocks, x)`; `batches_for_epoch` plugs into `run_training`.

    with DataPlaneClient() as client, ChannelLoader.open(client, job_id) as loader:
        for epoch in range(loader.epochs):
            for batch in loader.batches_for_epoch(epoch):
                loss = criterion(model(batch.blocks, batch.x), batch.y); ...; batch.release()
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from graphtier.contract.errors import DaemonNotRunningError, GraphtierError
from graphtier.contract.runtime_dir import LOG_FILE
from graphtier.launcher.client import process_state
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.pipeline import Batch, ChannelReader, ChannelStats
from graphtier.service.pipeline.errors import ProducerError
from graphtier.service.pipeline.wire import ChannelGrant
from graphtier.service.shm.naming import process_start_time


def env_rank() -> int:
    """The global rank torchrun gave this process (RANK, else LOCAL_RANK, else 0)."""
    raw = os.environ.get("RANK") or os.environ.get("LOCAL_RANK") or "0"
    try:
        return int(raw)
    except ValueError:
        raise GraphtierError(f"environment variable RANK/LOCAL_RANK={raw!r} is not an integer") from None


class ChannelLoader:
    """One rank's producer channel; `batches_for_epoch(e)` yields epoch e's batches in order."""

    def __init__(self, client: DataPlaneClient, grant: ChannelGrant) -> None:
        self.client = client
        self.grant = grant
        self.reader = ChannelReader(grant.layout, timeout=grant.stall_timeout_s)
        self.batches_taken = 0
        self._released = False
        daemon = client.address.pid if client.address is not None else 0
        self._daemon = (daemon, process_start_time(daemon)) if daemon > 0 else None  # to tell when it is gone

    @classmethod
    def open(cls, client: DataPlaneClient, job_id: str, rank: int | None = None) -> ChannelLoader:
        """Open the channel of `rank` (default: this torchrun rank) of job `job_id`."""
        grant = client.open_channel(job_id, env_rank() if rank is None else rank, os.getpid())
        return cls(client, grant)

    @property
    def epochs(self) -> int:
        return self.grant.layout.epochs

    @property
    def steps_per_epoch(self) -> int:
        return self.grant.layout.steps_per_epoch

    def batches_for_epoch(self, epoch: int) -> Iterator[Batch]:
        """Epoch `epoch`'s batches. A fresh producer starts at epoch 0: earlier epochs (already
        trained before a restart) are drained and released first."""
        if epoch < self.reader.epochs_completed:
            raise GraphtierError(
                f"epoch {epoch} of channel {self.grant.layout.channel!r} has passed "
                f"({self.reader.epochs_completed} epochs done); epochs are read in order"
            )
        try:
            while self.reader.epochs_completed < epoch and not self.reader.finished:
                for batch in self.reader.epoch():
                    batch.release()
            for batch in self.reader.epoch():
                if batch.x is None and batch.pairs is None:  # a link batch may learn its inputs instead
                    raise GraphtierError(f"batch {batch.batch} carries no features; the dataset has none to train on")
                self.batches_taken += 1
                yield batch
        except ProducerError as exc:
            raise self._daemon_gone(exc) or exc from None

    def _daemon_gone(self, exc: ProducerError) -> DaemonNotRunningError | None:
        """What a producer's end means when the daemon that started it has ended (killed, crashed): that the
        daemon is gone, which took its producers with it; None while the daemon runs."""
        if self._daemon is None:
            return None
        pid, started = self._daemon
        if process_start_time(pid) == started and process_state(pid) not in (None, "Z"):
            return None
        where = self.client.runtime_dir
        return DaemonNotRunningError(
            f"the graphtier daemon (pid {pid}) at {where} ended while rank {self.grant.layout.rank} of job "
            f"{self.grant.job_id} trained (killed or crashed; its log: {where / LOG_FILE}), and its producers "
            f"went with it ({exc}): the job cannot go on; start the daemon again and relaunch"
        )

    def stats(self) -> ChannelStats:
        return self.reader.stats()

    def close(self, reason: str = "") -> None:
        """Say goodbye to the producer and give the channel back to the daemon (once)."""
        self.reader.close()
        if not self._released:
            self._released = True
            try:
                self.client.release_channel(self.grant.job_id, self.grant.layout.rank, reason)
            except GraphtierError:
                if not reason:
                    raise  # a failing rank's own error matters more than the goodbye

    def __enter__(self) -> ChannelLoader:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close("" if exc is None else f"{type(exc).__name__}: {exc}")
