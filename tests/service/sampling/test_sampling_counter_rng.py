"""The torch emulation of the counter-based RNG matches exact 64-bit integer arithmetic."""

from __future__ import annotations

import random

import torch

from graphtier.service.sampling.counter_rng import (
    GOLDEN,
    NODE_STRIDE,
    node_keys,
    splitmix64,
    splitmix64_int,
    to_int64,
    uniform_below,
)

M64 = (1 << 64) - 1


def test_splitmix64_known_answers() -> None:
    # Reference values of the SplitMix64 generator seeded with 0 (its first two outputs).
    assert splitmix64_int(0) == 0xE220A8397B1DCDAF
    assert splitmix64_int(GOLDEN) == 0x6E789E6AA1B965F4


def test_torch_splitmix64_matches_integer_reference() -> None:
    rng = random.Random(7)
    words = [0, 1, M64, 1 << 63, (1 << 63) - 1] + [rng.getrandbits(64) for _ in range(2000)]
    got = splitmix64(torch.tensor([to_int64(w) for w in words], dtype=torch.int64)).tolist()
    assert got == [to_int64(splitmix64_int(w)) for w in words]


def test_node_keys_and_uniform_draws_match_integer_reference() -> None:
    rng = random.Random(3)
    for seed in (0, 5, M64, -1, 2**63 + 11):
        local = list(range(50)) + [rng.randrange(1 << 40) for _ in range(50)]
        keys = node_keys(seed, torch.tensor(local))
        seed_key = splitmix64_int(seed & M64)
        want = [splitmix64_int((seed_key + local_id * NODE_STRIDE) & M64) for local_id in local]
        assert keys.tolist() == [to_int64(w) for w in want]
        bounds = [rng.randrange(1, 1 << 33) for _ in local]
        for j in (0, 1, 14):
            got = uniform_below(keys, j, torch.tensor(bounds)).tolist()
            assert got == [
                (splitmix64_int((k + j * GOLDEN) & M64) >> 11) % m for k, m in zip(want, bounds, strict=True)
            ]


def test_draws_are_in_range_and_spread() -> None:
    keys = node_keys(1, torch.arange(10000))
    draws = uniform_below(keys, 0, torch.full((10000,), 10))
    assert int(draws.min()) == 0 and int(draws.max()) == 9
    counts = torch.bincount(draws, minlength=10)
    assert int(counts.min()) > 900 and int(counts.max()) < 1100  # 1000 expected, sd ~30
