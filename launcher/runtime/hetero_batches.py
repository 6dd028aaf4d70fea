"""`HeteroLocalBatches`: heterogeneous mini-batches sampled and gathered in the trainer's own process.

The heterogeneous counterpart of `LocalBatchSource` for a heterogeneous dataset, prepared on disk or attached
from the daemon's tiers: the `HeteroNeighborSampler` over its heterogeneous CSC, and each featured type's
input rows read by type-local id (from its `features.<type>` array, or gathered from that
type's tiers). A heterogeneous job's ranks evaluate with it, every neighbour taken. Its epochs follow
the job's `EpochPlan` (graphtier.service.pipeline.epoch_plan), the rule a heterogeneous producer
follows: for the same seed, epoch, rank and step it draws the producer's batch. Evaluation
shards are exact (every world_size-th id of a split).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import cached_property

import torch
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError, SamplingError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.epoch_plan import EpochPlan, check_batch_size, check_rank, eval_batches
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler
from graphtier.service.sampling.subgraph import SampledSubgraph
from graphtier.service.store import AttachedDataset

__all__ = ["HeteroLocalBatches", "hetero_forward"]


def hetero_forward(model: nn.Module, batch: Batch) -> Tensor:
    """The built-in heterogeneous models' call: `model(blocks, edge_types, node_ids, node_types, features)`."""
    ids, types = batch.input_nodes
    return model(batch.blocks, batch.edge_types, ids, types, batch.x)


class HeteroLocalBatches:
    """Sampled, gathered heterogeneous mini-batches of one rank's shard of a heterogeneous dataset's splits."""

    def __init__(
        self,
        dataset: PreparedDataset | AttachedDataset,
        fanouts: Sequence[str | int],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        *,
        eval_fanouts: Sequence[str | int] | None = None,
        eval_batch_size: int | None = None,
    ) -> None:
        """`eval_batch_size`: seeds per evaluation batch (default `batch_size`); with every neighbour
        taken (`eval_fanouts` -1) an evaluation's figures do not depend on it, only its time does."""
        if isinstance(dataset, AttachedDataset):
            schema, self.name = dataset.handle.hetero, dataset.handle.dataset
        else:
            schema, self.name = dataset.manifest.hetero, dataset.name
        if schema is None:
            raise GraphtierError(f"dataset {self.name!r} is not a heterogeneous graph; use LocalBatchSource")
        check_batch_size(batch_size)
        check_rank(rank, world_size)
        self.dataset, self.schema = dataset, schema
        self.batch_size, self.rank, self.world_size, self.seed = batch_size, rank, world_size, seed
        self.eval_batch_size = eval_batch_size or batch_size
        edge_type = dataset.edge_type if isinstance(dataset, AttachedDataset) else dataset.array("edge_type")
        assert edge_type is not None  # a heterogeneous handle carries it
        self.sampler = HeteroNeighborSampler(dataset.graph, edge_type, schema, fanouts)
        self.eval_sampler = (
            HeteroNeighborSampler(dataset.graph, edge_type, schema, eval_fanouts) if eval_fanouts else self.sampler
        )
        if isinstance(dataset, AttachedDataset):
            self._splits = dataset.splits
            self._featured = set(dataset.handle.hetero_features)
        else:
            self._splits = {name: dataset.split(name) for name in ("train", "val", "test")}
            self._rows = {t.name: dataset.array(t.feature_array) for t in schema.node_types if t.feature_array}
            self._featured = set(self._rows)
        if dataset.labels is None:  # a heterogeneous source labels its target node type
            raise GraphtierError(f"dataset {self.name!r} has no node labels: a batch carries its seeds' labels")
        self.labels = dataset.labels

    def _rows_of(self, node_type: str, local: Tensor) -> Tensor:
        """Rows `local` (type-local ids) of a featured node type."""
        if isinstance(self.dataset, AttachedDataset):
            tiers = self.dataset.hetero_tiers(node_type)
            out = torch.empty((local.numel(), *tiers.row_shape), dtype=tiers.dtype)
            self.dataset.gather_hetero(node_type, local, out)
            return out
        return torch.index_select(self._rows[node_type], 0, local)

    @cached_property
    def plan(self) -> EpochPlan:
        """This rank's epoch plan over the train ids (made when first needed: evaluation needs none)."""
        train = self._splits["train"].numel()
        try:
            return EpochPlan(train, self.batch_size, self.seed, self.rank, self.world_size, unit="train ids")
        except SamplingError as exc:
            raise SamplingError(f"dataset {self.name!r}: {exc}") from None

    def steps_per_epoch(self) -> int:
        """Batches per epoch on this rank (the same on every rank)."""
        return self.plan.steps_per_epoch

    def _batch(self, sampler: HeteroNeighborSampler, seeds: torch.Tensor, seed: int) -> Batch:
        return self._gathered(sampler.sample(seeds, seed=seed), seeds, seed)

    def _gathered(self, sub: SampledSubgraph, seeds: torch.Tensor, sample_seed: int) -> Batch:
        """The batch of a sample of `seeds` drawn with `sample_seed`: each featured type's input rows read."""
        n = sub.block(0).num_src if sub.num_layers else sub.num_seeds
        assert sub.node_types is not None  # a heterogeneous sampler's sample
        ids, types = sub.node_ids[:n], sub.node_types[:n]
        features = {}
        for index, info in enumerate(self.schema.node_types):
            if info.name in self._featured:
                features[info.name] = self._rows_of(info.name, ids[types == index] - info.offset)
        return Batch(subgraph=sub, x=features, y=self.labels[seeds], traffic=TrafficCounts(), sample_seed=sample_seed)

    def batch(self, seeds: Tensor, sample_seed: int) -> Batch:
        """The training batch of `seeds` (global ids of the target type) sampled with `sample_seed`:
        what `epoch` yields for a planned batch of those seeds."""
        return self._batch(self.sampler, seeds, sample_seed)

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """This rank's training batches of `epoch`."""
        for _, seeds, sample_seed in self.plan.batches(self._splits["train"], epoch):
            yield self.batch(seeds, sample_seed)

    def evaluate(self, split: str) -> Iterator[Batch]:
        """This rank's exact shard of `split` ("val" or "test"), in batches."""
        if split not in self._splits:
            raise GraphtierError(f"dataset {self.name!r} has no split {split!r}; it has {sorted(self._splits)}")
        planned = eval_batches(
            self._splits[split], self.eval_batch_size, seed=self.seed, rank=self.rank, world_size=self.world_size
        )
        for _, seeds, sample_seed in planned:
            yield self._batch(self.eval_sampler, seeds, sample_seed)

    eval_batches = evaluate  # the name the train loop's evaluation calls
