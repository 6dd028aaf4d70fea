"""Counter-based randomness of the neighbour sampler, emulated in torch int64 arithmetic.

Mirror of `native/include/graphtier/counter_rng.h`: the j-th draw for the frontier node with
local id `l` is `h = splitmix64(mix(seed, l, j))` with
`mix(seed, l, j) = node_key(seed, l) + j * GOLDEN` and
`node_key(seed, l) = splitmix64(splitmix64(seed) + l * NODE_STRIDE)` (all mod 2**64), and a
uniform integer in [0, m) is `(h >> 11) % m`. Because a draw depends only on (seed, l, j),
native and torch samplers agree bit for bit whatever the thread count.

torch has no uint64 arithmetic, so words live in int64: additions and multiplications wrap
the same way, and logical right shifts are arithmetic shifts masked to the low bits.
"""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
NODE_STRIDE = 0xD1B54A32D192ED03
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


def to_int64(word: int) -> int:
    """The int64 with the same 64 bits as the (any-size) Python int `word` mod 2**64."""
    word &= _MASK64
    return word - (1 << 64) if word >= 1 << 63 else word


def splitmix64_int(x: int) -> int:
    """splitmix64 on a Python int (exact reference; returns an unsigned 64-bit value)."""
    z = (x + GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return z ^ (z >> 31)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 words."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 applied element-wise to int64 words (wrapping arithmetic)."""
    z = x + to_int64(GOLDEN)
    z = (z ^ _shr(z, 30)) * to_int64(_MUL1)
    z = (z ^ _shr(z, 27)) * to_int64(_MUL2)
    return z ^ _shr(z, 31)


def node_keys(seed: int, local_ids: torch.Tensor) -> torch.Tensor:
    """Stream keys of the nodes with these local ids (int64 tensor) under `seed`."""
    seed_key = to_int64(splitmix64_int(seed & _MASK64))
    return splitmix64(local_ids * to_int64(NODE_STRIDE) + seed_key)


def uniform_below(keys: torch.Tensor, j: int, bound: torch.Tensor) -> torch.Tensor:
    """Draw number `j` of each key, as a uniform integer in [0, bound) (bound >= 1)."""
    h = splitmix64(keys + to_int64(j * GOLDEN))
    return _shr(h, 11) % bound


def stream(seed: int, count: int) -> torch.Tensor:
    """The first `count` words (int64) of the stream keyed by `seed`: word w is
    `splitmix64(splitmix64(seed) + w * GOLDEN)`, `draw(splitmix64(seed), w)` in the header. The
    bits draw of `graphtier.nn.Dropout` reads its masks from it."""
    key = to_int64(splitmix64_int(seed & _MASK64))
    return splitmix64(torch.arange(count, dtype=torch.int64) * to_int64(GOLDEN) + key)
