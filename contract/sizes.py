"""Sizes as people type them ("512MiB", "1.5GB", "10%"): one reading for every budget.

Tier budgets (`service/placement/tier_budget.py`), the memory budget of `prepare` and the rows a
partitioned job replicates (`partition.py`) all accept the same text; they differ only in
what a bare number or a percentage means, which each decides itself.
"""

from __future__ import annotations

import re
from decimal import Decimal

SIZE_UNITS: dict[str, int] = {
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gib": 2**30,
    "t": 10**12,
    "tb": 10**12,
    "tib": 2**40,
}
UNIT_HELP = "B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024)"
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z%]*)\s*")


def split_size(text: str) -> tuple[Decimal, str] | None:
    """The number (exact: '1.1GB' is not a float's rounding) and the unit as heterogeneous ('' for none, '%'
    for a percentage; `SIZE_UNITS` is keyed lower-case) of `text`; None when it is not a
    non-negative number with a unit."""
    match = _SIZE.fullmatch(text)
    if match is None:
        return None
    return Decimal(match.group(1)), match.group(2)
