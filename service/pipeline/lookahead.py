"""The producer's batches in order, sampled `depth` batches ahead of the one being gathered.

Each batch is sampled exactly as without look-ahead (its seeds and sample seed come from the
`EpochPlan`: they depend only on the job seed, epoch, rank and step), so the batches are the
same; sampling ahead only lets the storage reads of a batch start early (`admit`, the look-ahead
window) and lets rows that recur within the window be read once (and a partitioned job's
fetches of other nodes' rows start early). A batch the window had no room for (a deferred
ticket) is the last sampled ahead until it is handed out: the window is as deep as its memory
allows. `depth` 0 samples each batch when it is due. Without `sample` (a `--sampler gpu`
producer, which samples each batch on its GPU when it makes it) the batches come unsampled.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from graphtier.service.pipeline.epoch_plan import EpochPlan
from graphtier.service.pipeline.peer_rows import RemoteTicket
from graphtier.service.sampling import SampledSubgraph
from graphtier.service.storage import Ticket

# What `admit` started for one batch: None without a window (or with no storage rows), a window's
# ticket, a partitioned job's fetches, or a heterogeneous job's of each node type
BatchTicket = Ticket | RemoteTicket | dict[str, Ticket | RemoteTicket] | None


@dataclass
class Planned:
    """One batch, sampled, with its place in the window."""

    epoch: int
    step: int
    batch: int  # running number over all epochs
    seeds: torch.Tensor
    sample_seed: int
    subgraph: SampledSubgraph | None  # None: sampled when the batch is made (no `sample` given)
    sample_ns: int
    ticket: BatchTicket


def _deferred(ticket: BatchTicket) -> bool:
    """A window ticket admitted without room: nothing is sampled past it until it is handed out."""
    return isinstance(ticket, Ticket) and ticket.deferred


class Lookahead:
    """Yields every batch of every epoch in order, keeping `depth` more sampled and admitted."""

    def __init__(
        self,
        *,
        plan: EpochPlan,
        train_ids: torch.Tensor,
        epochs: int,
        depth: int,
        sample: Callable[[torch.Tensor, int], SampledSubgraph] | None,
        admit: Callable[[SampledSubgraph], BatchTicket] | None = None,
    ) -> None:
        self.depth = depth
        self._sample, self._admit = sample, admit
        self._plan = self._batches(plan, train_ids, epochs)
        self._ahead: deque[Planned] = deque()

    @staticmethod
    def _batches(
        plan: EpochPlan, train_ids: torch.Tensor, epochs: int
    ) -> Iterator[tuple[int, int, int, torch.Tensor, int]]:
        batch = 0
        for epoch in range(epochs):
            for step, seeds, sample_seed in plan.batches(train_ids, epoch):
                yield epoch, step, batch, seeds, sample_seed
                batch += 1

    @property
    def sampled_ahead(self) -> int:
        """Batches sampled beyond the one last handed out."""
        return len(self._ahead)

    def next(self) -> Planned | None:
        """The next batch (sampling up to `depth` more first, so their reads start now); None at the end."""
        while len(self._ahead) <= self.depth and not (self._ahead and _deferred(self._ahead[-1].ticket)):
            planned = next(self._plan, None)
            if planned is None:
                break
            epoch, step, batch, seeds, seed = planned
            if self._sample is None:
                self._ahead.append(Planned(epoch, step, batch, seeds, seed, None, 0, None))
                continue
            t0 = time.perf_counter_ns()
            sub = self._sample(seeds, seed)
            sample_ns = time.perf_counter_ns() - t0
            ticket = self._admit(sub) if self._admit is not None else None
            self._ahead.append(Planned(epoch, step, batch, seeds, seed, sub, sample_ns, ticket))
        return self._ahead.popleft() if self._ahead else None
