"""The embedded default dataset: an R-MAT power-law graph with planted, learnable communities.

Structure follows R-MAT / Graph500 Kronecker generation (a=0.57, b=c=0.19): one quadrant
choice per bit level for all edges at once, then a random relabelling that removes the
id/degree correlation. Communities are contiguous ranges of the pre-relabel id space; a
`homophily` fraction of edges has its destination moved into the source's community (the
offset inside the community is kept, so the degree skew survives). Features are a class
centroid plus Gaussian noise, so a model reading a node's own features alone is clearly
beaten by one that also averages its neighbours'.
"""

from __future__ import annotations

import torch

from graphtier.service.errors import DatasetSourceError
from graphtier.service.graph.graph_data import GraphData

RMAT_A, RMAT_B, RMAT_C = 0.57, 0.19, 0.19
MAX_SCALE = 30


def _fail(problem: str) -> None:
    raise DatasetSourceError("synthetic:rmat", problem)


def rmat_edges(
    scale: int,
    num_edges: int,
    generator: torch.Generator,
    *,
    a: float = RMAT_A,
    b: float = RMAT_B,
    c: float = RMAT_C,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`num_edges` R-MAT edges over `2**scale` ids, before any relabelling (vectorised per bit level).

    Two uniform draws per bit level, in the order Graph500-style generators use, so a seeded
    generator reproduces the reference benchmark graphs draw for draw.
    """
    ab = a + b
    c_norm = c / (1.0 - ab)
    a_norm = a / ab
    src = torch.zeros(num_edges, dtype=torch.int64)
    dst = torch.zeros(num_edges, dtype=torch.int64)
    for level in range(scale):
        r1 = torch.rand(num_edges, generator=generator)
        r2 = torch.rand(num_edges, generator=generator)
        src_bit = r1 > ab
        dst_bit = torch.where(src_bit, r2 > c_norm, r2 > a_norm)
        src |= src_bit.to(torch.int64) << level
        dst |= dst_bit.to(torch.int64) << level
    return src, dst


def generate_rmat(
    *,
    scale: int = 15,
    edge_factor: int = 12,
    num_classes: int = 8,
    feature_dim: int = 128,
    homophily: float = 0.7,
    feature_noise: float = 6.0,
    train_fraction: float = 0.1,
    val_fraction: float = 0.05,
    test_fraction: float = 0.1,
    seed: int = 0,
) -> GraphData:
    """Generate the synthetic graph: `2**scale` nodes and `edge_factor * 2**scale` directed edges.

    Self-loops are dropped; duplicates are left for the CSC builder to collapse. Pass
    `--undirected` to `dataset prepare` for the symmetric graph the benchmarks use.
    """
    if not 1 <= scale <= MAX_SCALE:
        _fail(f"scale must be in [1, {MAX_SCALE}], got {scale}")
    if edge_factor < 1:
        _fail(f"edge_factor must be >= 1, got {edge_factor}")
    num_nodes = 1 << scale
    if not 2 <= num_classes <= num_nodes:
        _fail(f"num_classes must be in [2, {num_nodes}], got {num_classes}")
    if feature_dim < 1:
        _fail(f"feature_dim must be >= 1, got {feature_dim}")
    if not 0.0 <= homophily <= 1.0:
        _fail(f"homophily must be in [0, 1], got {homophily}")
    if feature_noise < 0:
        _fail(f"feature_noise must be >= 0, got {feature_noise}")
    fractions = {"train": train_fraction, "val": val_fraction, "test": test_fraction}
    for name, value in fractions.items():
        if not 0.0 <= value <= 1.0:
            _fail(f"{name}_fraction must be in [0, 1], got {value}")
    if sum(fractions.values()) > 1.0 + 1e-9:
        _fail(f"train+val+test fractions add up to {sum(fractions.values()):.3f} > 1")

    gen = torch.Generator().manual_seed(seed)
    src, dst = rmat_edges(scale, edge_factor * num_nodes, gen)

    # Planted communities: contiguous ranges of the R-MAT id space.
    starts = torch.arange(num_classes + 1, dtype=torch.int64) * num_nodes // num_classes
    sizes = starts[1:] - starts[:-1]
    community = torch.bucketize(torch.arange(num_nodes), starts[1:], right=True)
    rewire = torch.rand(src.numel(), generator=gen) < homophily
    c_src, c_dst = community[src[rewire]], community[dst[rewire]]
    offset = dst[rewire] - starts[c_dst]
    dst[rewire] = starts[c_src] + offset % sizes[c_src]
    del rewire, c_src, c_dst, offset

    keep = src != dst
    src, dst = src[keep], dst[keep]
    del keep
    relabel = torch.randperm(num_nodes, generator=gen)
    src, dst = relabel[src], relabel[dst]
    labels = torch.empty(num_nodes, dtype=torch.int64)
    labels[relabel] = community

    centroids = torch.randn(num_classes, feature_dim, generator=gen)
    features = torch.randn(num_nodes, feature_dim, generator=gen).mul_(feature_noise)
    features.add_(centroids[labels])

    order = torch.randperm(num_nodes, generator=gen)
    counts = [int(round(f * num_nodes)) for f in fractions.values()]
    if counts[0] == 0:
        _fail(f"train_fraction {train_fraction} leaves no training node at scale {scale}")
    splits: dict[str, torch.Tensor] = {}
    begin = 0
    for name, count in zip(fractions, counts):
        splits[name] = order[begin : begin + count].sort().values
        begin += count

    return GraphData(
        num_nodes=num_nodes,
        src=src,
        dst=dst,
        features=features,
        labels=labels,
        splits=splits,
        origin="synthetic:rmat",
        description={
            "generator": "rmat",
            "scale": scale,
            "edge_factor": edge_factor,
            "rmat_abc": [RMAT_A, RMAT_B, RMAT_C],
            "num_classes": num_classes,
            "feature_dim": feature_dim,
            "homophily": homophily,
            "feature_noise": feature_noise,
            "seed": seed,
        },
    ).validate()
