"""Fanouts (neighbours per hop) as the sampler, a channel and a job spec all accept them.

One parser (`parse_fanouts`: the command line's `--fanout 15,10,5` and `graphtier.connect`'s
`fanout=`) and one check (`validate_fanouts`) shared by `JobSpec` (validated where the client
builds it), the producer's channel and the samplers, so a bad fanout reads the same wherever
it is caught. They live in the contract, beside the rest of the epoch plan's inputs
(graphtier.service.pipeline.epoch_plan), because the command line reads them without torch.
"""

from __future__ import annotations

from collections.abc import Sequence

from graphtier.contract.errors import SamplingError

MAX_HOPS = 8  # a channel's control block has room for this many hops
MAX_FANOUT = 2**31 - 1  # fanouts travel as int32 (job spec, channel); -1 takes every neighbour


def validate_fanouts(fanouts: Sequence[int]) -> list[int]:
    """Fanouts as a list of ints, each -1 (all neighbours) or >= 1; SamplingError otherwise."""
    if isinstance(fanouts, (str, bytes)) or not isinstance(fanouts, Sequence):
        raise SamplingError(f"fanouts must be a sequence of ints such as [15, 10, 5], got {fanouts!r}")
    if len(fanouts) == 0:
        raise SamplingError("fanouts must name at least one hop, got []")
    checked = []
    for hop, k in enumerate(fanouts):
        if isinstance(k, bool) or not isinstance(k, int) or not (k == -1 or 1 <= k <= MAX_FANOUT):
            raise SamplingError(
                f"fanout {k!r} for hop {hop + 1} in {list(fanouts)} is invalid; use -1 (all neighbours) or an int "
                f"from 1 to {MAX_FANOUT}"
            )
        checked.append(int(k))
    return checked


def parse_fanouts(value: str | Sequence[int], *, given_as: str = "--fanout") -> list[int]:
    """`"15,10,5"` (or a sequence of ints) as [15, 10, 5], checked by `validate_fanouts`; SamplingError
    naming `given_as` (the flag or argument it came from) otherwise."""
    if isinstance(value, str):
        try:
            value = [int(part) for part in value.split(",")]
        except ValueError:
            raise SamplingError(
                f"{given_as} {value!r}: expected comma-separated integers like 15,10,5 (-1 = all neighbours)"
            ) from None
    try:
        return validate_fanouts(value)
    except SamplingError as exc:
        raise SamplingError(f"{given_as}: {exc}") from None


def check_channel_fanouts(fanouts: list[int]) -> list[int]:
    """Fanouts a channel can carry: valid for the sampler and at most MAX_HOPS hops (ValueError otherwise)."""
    try:
        checked = validate_fanouts(fanouts)
    except SamplingError as exc:
        raise ValueError(str(exc)) from None
    if len(checked) > MAX_HOPS:
        raise ValueError(f"{len(checked)} hops in {checked}; a channel carries at most {MAX_HOPS}")
    return checked
