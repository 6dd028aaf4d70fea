"""A seeded random train/val/test split for graphs whose source ships none.

Training needs train ids (the producers' seeds), so every loaded graph gets a split: the
source's own split when it has one, otherwise this one. Candidates are the labelled nodes
(all nodes when the graph has no labels); they are shuffled with a seeded generator and
cut into consecutive train / val / test parts of `floor(fraction * candidates)` ids each.
The rule and its parameters are recorded in `description["split"]` so a prepared dataset
says how its split was made.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData


def _check_fractions(origin: str, fractions: dict[str, float]) -> None:
    for name, value in fractions.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise DatasetSourceError(origin or None, f"{name} must be a number in [0, 1], got {value!r}")
    total = sum(fractions.values())
    if total > 1.0 + 1e-9:
        parts = " + ".join(f"{name} {value}" for name, value in fractions.items())
        raise DatasetSourceError(origin or None, f"split fractions add up to {total:g} > 1 ({parts})")


def ensure_split(
    graph: GraphData,
    *,
    train_fraction: float = 0.1,
    val_fraction: float = 0.05,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> GraphData:
    """Return `graph` unchanged if it has a non-empty train split, else a copy with a random one.

    Raises `DatasetSourceError` (naming the graph's origin) for fractions outside [0, 1],
    fractions summing above 1, a graph with labels but no labelled node, or a train
    fraction too small to give at least one train node.
    """
    fractions = {"train_fraction": train_fraction, "val_fraction": val_fraction, "test_fraction": test_fraction}
    _check_fractions(graph.origin, fractions)
    existing = graph.splits.get("train")
    if existing is not None and existing.numel() > 0:
        return graph
    if graph.labels is not None:
        candidates = (graph.labels != UNLABELLED).nonzero().flatten()
        among = "labelled nodes"
        if candidates.numel() == 0:
            raise DatasetSourceError(graph.origin or None, "cannot make a split: no node has a label")
    else:
        candidates = torch.arange(graph.num_nodes, dtype=torch.int64)
        among = "all nodes (the graph has no labels)"
    n = candidates.numel()
    counts = [math.floor(f * n + 1e-9) for f in (train_fraction, val_fraction, test_fraction)]
    if counts[0] == 0:
        raise DatasetSourceError(
            graph.origin or None,
            f"train_fraction {train_fraction} of {n} candidate nodes gives an empty train split",
        )
    generator = torch.Generator().manual_seed(int(seed))
    shuffled = candidates[torch.randperm(n, generator=generator)]
    bounds = [0, counts[0], counts[0] + counts[1], sum(counts)]
    splits = {
        name: shuffled[bounds[i] : bounds[i + 1]].sort().values for i, name in enumerate(("train", "val", "test"))
    }
    description = dict(graph.description)
    description["split"] = {
        "rule": "seeded random permutation of the candidates, cut into train/val/test",
        "among": among,
        "seed": int(seed),
        **fractions,
        "counts": dict(zip(("train", "val", "test"), counts, strict=True)),
    }
    return dataclasses.replace(graph, splits=splits, description=description).validate()
