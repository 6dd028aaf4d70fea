"""Which seeds a rank trains on in an epoch, and the sampling seed of each of its batches.

Every rank draws the same permutation of the train ids for an epoch (seeded by the job
seed and the epoch), drops the last `T mod world_size` ids of it so that all ranks get
`T // world_size` ids and run the same number of DDP steps, and takes its contiguous share.
The dropped ids change every epoch, so none is left out for good. A rank's last batch of
an epoch is smaller than `batch_size` when its share does not divide evenly.
"""

from __future__ import annotations

import torch

_MASK = (1 << 64) - 1


def mix_seed(*words: int) -> int:
    """A 63-bit seed from several ints (splitmix64 finaliser over each), stable across runs."""
    state = 0x9E3779B97F4A7C15
    for word in words:
        state = (state ^ (word & _MASK)) * 0xBF58476D1CE4E5B9 & _MASK
        state = (state ^ (state >> 31)) * 0x94D049BB133111EB & _MASK
        state ^= state >> 29
    return state >> 1


def shard_size(num_train: int, world_size: int) -> int:
    """Seeds per rank per epoch (the tail of T mod world_size ids is dropped)."""
    return num_train // world_size


def steps_per_epoch(num_train: int, world_size: int, batch_size: int) -> int:
    """Batches per rank per epoch; equal on every rank."""
    return -(-shard_size(num_train, world_size) // batch_size)


def rank_shard(train_ids: torch.Tensor, *, seed: int, epoch: int, rank: int, world_size: int) -> torch.Tensor:
    """This rank's seeds for `epoch`, in training order."""
    generator = torch.Generator().manual_seed(mix_seed(seed, epoch))
    perm = torch.randperm(train_ids.numel(), generator=generator)
    size = shard_size(train_ids.numel(), world_size)
    return train_ids[perm[rank * size : (rank + 1) * size]]


def batch_seeds(shard: torch.Tensor, step: int, batch_size: int) -> torch.Tensor:
    """The seeds of batch `step` of a shard (a view)."""
    return shard[step * batch_size : (step + 1) * batch_size]


def sample_seed(seed: int, epoch: int, rank: int, step: int) -> int:
    """The `NeighborSampler.sample` seed of one batch."""
    return mix_seed(seed, epoch, rank, step, 0x5A3)
