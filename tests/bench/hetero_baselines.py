"""Label-propagation baselines of a heterogeneous dataset's target type: the floor its typed models must beat.

For every metapath of `--hops` relations that returns to the target type (Freebase: movie-actor-movie,
movie-director-movie, movie-writer-movie; ACM: paper-author-paper, paper-subject-paper), label
propagation (Zhou et al. 2004) over the metapath's row-normalised adjacency product
`P = A_r1 ... A_rk` (`graphtier.service.graph.metapath_features`): `F <- alpha P F + (1 - alpha) Y`,
`Y` the one-hot training labels (validation and test labels are never read), `--iterations` times;
each node is predicted the class of its largest `F` entry, the training set's most frequent class
where `F` is all zero. "all" propagates over the mean of the metapaths' `P`. With `--iterations 1
--alpha 1` it is the one-step metapath vote. Prints validation and test accuracy per metapath.

Run: python tests/bench/hetero_baselines.py --dataset /work/shared/datasets/ogb_hetero_freebase
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from graphtier.service.graph.metapath_features import metapaths, relation_adjacency
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.prepare import prepare_dataset
from graphtier.service.prepared.steps import PrepareConfig


def propagate(operators: list[list[torch.Tensor]], y: torch.Tensor, alpha: float, iterations: int) -> torch.Tensor:
    """`iterations` rounds of `F <- alpha mean_p(P_p F) + (1 - alpha) Y` over the metapath operators `operators`
    (each a list of sparse adjacencies applied right to left)."""
    f = y.clone()
    for _ in range(iterations):
        spread = torch.zeros_like(f)
        for chain in operators:
            h = f
            for adjacency in reversed(chain):
                h = torch.sparse.mm(adjacency, h)
            spread += h
        f = alpha * spread / len(operators) + (1 - alpha) * y
    return f


def accuracy(scores: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor, fallback: int) -> float:
    predicted = scores[ids].argmax(dim=1)
    predicted[scores[ids].sum(dim=1) == 0] = fallback  # reached by no training label
    return float((predicted == labels[ids]).float().mean())


def baselines(dataset: PreparedDataset, hops: int, alpha: float, iterations: int) -> dict[str, tuple[float, float]]:
    """Validation and test accuracy of label propagation over each metapath returning to the target type, and all."""
    schema = dataset.manifest.hetero
    assert schema is not None, f"{dataset.name} is not a heterogeneous dataset"
    target = schema.type_named(schema.target_type)
    labels = dataset.labels[target.offset : target.offset + target.count].to(torch.int64)
    train, val, test = (dataset.split(name).to(torch.int64) - target.offset for name in ("train", "val", "test"))
    num_classes = int(labels.max()) + 1
    y = torch.zeros(target.count, num_classes)
    y[train, labels[train]] = 1.0
    fallback = int(torch.bincount(labels[train], minlength=num_classes).argmax())
    adjacency = relation_adjacency(dataset.graph, dataset.array("edge_type"), schema)
    returning = [p for p in metapaths(schema, hops) if len(p.relations) == hops and p.types[-1] == target.name]
    chains = {"-".join(p.types): [adjacency[r] for r in p.relations] for p in returning}
    figures = {}
    for name, chain in [*((n, [c]) for n, c in chains.items()), ("all", list(chains.values()))]:
        scores = propagate(chain, y, alpha, iterations)
        figures[name] = (accuracy(scores, labels, val, fallback), accuracy(scores, labels, test, fallback))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", type=Path, required=True, help="a source in OGB's heterogeneous layout")
    parser.add_argument("--root", type=Path, help="where to prepare it (default: a temporary directory)")
    parser.add_argument("--hops", type=int, default=2, help="relations per metapath (2: M-A-M)")
    parser.add_argument("--alpha", type=float, default=0.9)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = args.root or Path(scratch)
        name = args.dataset.name.replace("ogb_hetero_", "")
        if not (root / name).exists():
            prepare_dataset(PrepareConfig(source=f"ogb:{args.dataset}", name=name, root=root))
        figures = baselines(PreparedDataset(root / name), args.hops, args.alpha, args.iterations)
    print(f"{name}: label propagation, alpha {args.alpha}, {args.iterations} iterations, {args.hops}-hop metapaths")
    for path, (val, test) in figures.items():
        print(f"  {path:40s} val {val:.4f}  test {test:.4f}")


if __name__ == "__main__":
    main()
