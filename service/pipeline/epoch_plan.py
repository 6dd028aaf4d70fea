"""The epoch plan: which seeds each rank trains on, in which batches, sampled with which seed.

One rule, followed by everything that draws a job's batches -- the producers (node, heterogeneous and
link batches), the in-process sources (`LocalBatchSource`, `HeteroLocalBatches`,
`HeteroLinkBatches`), link evaluation and the tiering replay -- so any of them draws the same
batch for the same (seed, epoch, rank, step); the daemon's notes count a job's steps by it:

- **Shuffle.** Each epoch every rank draws the same permutation of the T train seeds (node ids,
  or a link job's train-edge indices), seeded by (seed, epoch).
- **Shard.** The last T mod W seeds of the permutation are dropped and rank r takes the S = T // W
  seeds from r * S on. Every rank runs the same number of steps (each DDP step all-reduces), no
  seed repeats within an epoch, and the dropped seeds change every epoch, so none is left out for
  good. T < W is a `SamplingError` (a rank would have nothing to train on); the daemon refuses
  such a job at submit.
- **Batches.** A shard is cut, in order, into batches of `batch_size` seeds; the last is smaller
  when S does not divide evenly. `steps_per_epoch` = ceil(S / batch_size), equal on every rank.
- **Sample seeds.** Training batch `step` of `epoch` on rank r is sampled (its neighbours, a link
  batch's negatives) with `mix_seed(seed, epoch, r, step, TRAIN_STREAM)`.
- **Evaluation.** Rank r takes every W-th id of a split (the shards partition it exactly: nothing
  shuffled, nothing dropped), in batches; batch i is sampled with `mix_seed(seed, EVAL_STREAM, r, i)`.
- **Dropout.** A rank seeds torch's global generator once, where its training starts or resumes
  (step s), with seed + 7919 (r + 1) + s: ranks drop different units. (Not a `mix_seed`: kept
  as it was, so the built-in jobs train the models their documented figures come from.)

Fanouts are parsed and checked by `graphtier.contract.fanouts` (the command line reads them
without importing torch).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from graphtier.contract.errors import SamplingError

_MASK = (1 << 64) - 1
TRAIN_STREAM = 0x5A3  # the last word of a training batch's sample seed
EVAL_STREAM = 0x5EED_E7A1  # the second word of an evaluation batch's sample seed


def mix_seed(*words: int) -> int:
    """A 63-bit seed from several ints (splitmix64 finaliser over each), stable across runs."""
    state = 0x9E3779B97F4A7C15
    for word in words:
        state = (state ^ (word & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK
        state ^= state >> 29
    return state >> 1


class SeedBatch(NamedTuple):
    """One batch of a plan: its step, its seeds and the seed to sample it with."""

    step: int
    seeds: torch.Tensor
    sample_seed: int


def check_rank(rank: int, world_size: int) -> None:
    """SamplingError unless 0 <= rank < world_size (ints)."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rank, world_size)) or not (
        world_size >= 1 and 0 <= rank < world_size
    ):
        raise SamplingError(
            f"need world_size >= 1 and 0 <= rank < world_size, got rank={rank!r}, world_size={world_size!r}"
        )


def check_batch_size(batch_size: int) -> None:
    """SamplingError unless `batch_size` is an int >= 1."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SamplingError(f"batch_size must be an int >= 1, got {batch_size!r}")


@dataclass(frozen=True)
class EpochPlan:
    """One rank's training epochs over `num_train` seeds (see the module docstring for the rule)."""

    num_train: int
    batch_size: int
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    unit: str = field(default="train seeds", compare=False)  # what the seeds are, for messages

    def __post_init__(self) -> None:
        check_batch_size(self.batch_size)
        check_rank(self.rank, self.world_size)
        if self.num_train == 0:
            raise SamplingError(f"no {self.unit} to train on")
        if self.num_train < self.world_size:
            raise SamplingError(
                f"{self.num_train} {self.unit} cannot be shared by {self.world_size} ranks: each rank needs at "
                f"least one per epoch; run at most {self.num_train} ranks"
            )

    @property
    def shard_size(self) -> int:
        """Seeds per rank per epoch (T // W: the permutation's last T mod W seeds are dropped)."""
        return self.num_train // self.world_size

    @property
    def steps_per_epoch(self) -> int:
        """Batches per rank per epoch, equal on every rank."""
        return -(-self.shard_size // self.batch_size)

    def shard(self, train_ids: torch.Tensor, epoch: int) -> torch.Tensor:
        """This rank's seeds of `epoch`, in training order."""
        if train_ids.numel() != self.num_train:
            raise SamplingError(f"the plan is for {self.num_train} {self.unit}, got {train_ids.numel()}")
        generator = torch.Generator().manual_seed(mix_seed(self.seed, epoch))
        perm = torch.randperm(self.num_train, generator=generator)
        size = self.shard_size
        return train_ids[perm[self.rank * size : (self.rank + 1) * size]]

    def batch_seeds(self, shard: torch.Tensor, step: int) -> torch.Tensor:
        """The seeds of batch `step` of a shard (a view)."""
        return shard[step * self.batch_size : (step + 1) * self.batch_size]

    def sample_seed(self, epoch: int, step: int) -> int:
        """The sampling seed of training batch `step` of `epoch` on this rank."""
        return mix_seed(self.seed, epoch, self.rank, step, TRAIN_STREAM)

    def batches(self, train_ids: torch.Tensor, epoch: int) -> Iterator[SeedBatch]:
        """This rank's training batches of `epoch`, in order."""
        shard = self.shard(train_ids, epoch)
        for step in range(self.steps_per_epoch):
            yield SeedBatch(step, self.batch_seeds(shard, step), self.sample_seed(epoch, step))


def eval_shard(ids: torch.Tensor, *, rank: int, world_size: int) -> torch.Tensor:
    """Rank `rank`'s ids of a split: every world_size-th, so the ranks' shards partition it."""
    check_rank(rank, world_size)
    return ids[rank::world_size]


def eval_batches(ids: torch.Tensor, batch_size: int, *, seed: int, rank: int, world_size: int) -> Iterator[SeedBatch]:
    """Rank `rank`'s evaluation batches of `ids` (a split, or every node to embed), in order."""
    check_batch_size(batch_size)
    for step, seeds in enumerate(eval_shard(ids, rank=rank, world_size=world_size).split(batch_size)):
        yield SeedBatch(step, seeds, mix_seed(seed, EVAL_STREAM, rank, step))


def dropout_seed(seed: int, rank: int, step: int) -> int:
    """The seed of torch's global generator (dropout) for a rank starting or resuming at `step`."""
    return seed + 7919 * (rank + 1) + step
