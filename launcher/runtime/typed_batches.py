"""`TypedLocalBatches`: typed mini-batches sampled and gathered in the trainer's own process.

The typed counterpart of `LocalBatchSource` for a prepared typed dataset: the
`TypedNeighborSampler` over its typed CSC, and each featured type's input rows read from its
`features.<type>` array (memory-mapped) by type-local id. Epochs shuffle the train ids the same
way on every rank (seeded by `seed` and the epoch) and give rank r every world_size-th id,
wrapped so every rank runs the same number of steps; evaluation shards are exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.traffic import TrafficCounts
from graphtier.launcher.runtime.local_batches import _EVAL_STREAM, _ceil_div, batch_seed
from graphtier.service.pipeline.batch import TypedBatch
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling.typed_sampler import TypedNeighborSampler

__all__ = ["TypedBatch", "TypedLocalBatches"]


class TypedLocalBatches:
    """Sampled, gathered typed mini-batches of one rank's shard of a typed dataset's splits."""

    def __init__(
        self,
        dataset: PreparedDataset,
        fanouts: Sequence[str | int],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        *,
        eval_fanouts: Sequence[str | int] | None = None,
    ) -> None:
        schema = dataset.manifest.hetero
        if schema is None:
            raise GraphtierError(f"dataset {dataset.name!r} is not a typed graph; use LocalBatchSource")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise GraphtierError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if not (world_size >= 1 and 0 <= rank < world_size):
            raise GraphtierError(f"need world_size >= 1 and 0 <= rank < world_size, got {rank}, {world_size}")
        self.dataset, self.schema = dataset, schema
        self.batch_size, self.rank, self.world_size, self.seed = batch_size, rank, world_size, seed
        edge_type = dataset.array("edge_type")
        self.sampler = TypedNeighborSampler(dataset.graph, edge_type, schema, fanouts)
        self.eval_sampler = (
            TypedNeighborSampler(dataset.graph, edge_type, schema, eval_fanouts) if eval_fanouts else self.sampler
        )
        self._rows = {t.name: dataset.array(t.feature_array) for t in schema.node_types if t.feature_array}
        self.labels = dataset.labels

    def steps_per_epoch(self) -> int:
        return _ceil_div(_ceil_div(self.dataset.split("train").numel(), self.world_size), self.batch_size)

    def _batch(self, sampler: TypedNeighborSampler, seeds: torch.Tensor, seed: int) -> TypedBatch:
        sub = sampler.sample(seeds, seed=seed)
        n = sub.block(0).num_src if sub.num_layers else sub.num_seeds
        ids, types = sub.node_ids[:n], sub.node_types[:n]
        features = {}
        for index, info in enumerate(self.schema.node_types):
            if info.name in self._rows:
                local = ids[types == index] - info.offset
                features[info.name] = torch.index_select(self._rows[info.name], 0, local)
        return TypedBatch(subgraph=sub, features=features, labels=self.labels[seeds], traffic=TrafficCounts())

    def epoch(self, epoch: int) -> Iterator[TypedBatch]:
        """This rank's training batches of `epoch`."""
        train = self.dataset.split("train")
        order = train[torch.randperm(train.numel(), generator=torch.Generator().manual_seed(self.seed * 7919 + epoch))]
        per_rank = _ceil_div(order.numel(), self.world_size)
        padded = order.repeat(_ceil_div(per_rank * self.world_size, max(order.numel(), 1)))[
            : per_rank * self.world_size
        ]
        mine = padded[self.rank :: self.world_size]
        for index, seeds in enumerate(mine.split(self.batch_size)):
            yield self._batch(self.sampler, seeds.unique(), batch_seed(self.seed, epoch, self.rank, index))

    def evaluate(self, split: str) -> Iterator[TypedBatch]:
        """This rank's exact shard of `split` ("val" or "test"), in batches."""
        ids = self.dataset.split(split)[self.rank :: self.world_size]
        for index, seeds in enumerate(ids.split(self.batch_size)):
            yield self._batch(self.eval_sampler, seeds, batch_seed(self.seed, _EVAL_STREAM, self.rank, index))
