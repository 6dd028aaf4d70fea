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

from collections.abc import Iterator

import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import GraphData
from graphtier.service.sources import rmat_bits

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
    """`num_edges` R-MAT edges over `2**scale` ids, before any relabelling.

    Two uniform draws per edge per bit level, level after level, in the order Graph500-style
    generators use, so a seeded generator reproduces the reference benchmark graphs draw for
    draw. Each level's bits are packed into a bit plane and the ids assembled chunk by chunk
    (`rmat_bits`), which is what lets the streamed generator keep them on disk instead.
    """
    src_planes, dst_planes = rmat_bits.MemoryPlanes(), rmat_bits.MemoryPlanes()
    rmat_bits.draw_bit_planes(generator, scale, num_edges, src_planes, dst_planes, a=a, b=b, c=c)
    src = torch.empty(num_edges, dtype=torch.int64)
    dst = torch.empty(num_edges, dtype=torch.int64)
    for start in range(0, num_edges, rmat_bits.DEFAULT_CHUNK):
        count = min(rmat_bits.DEFAULT_CHUNK, num_edges - start)
        src[start : start + count] = rmat_bits.assemble_ids(src_planes, scale, num_edges, start, count)
        dst[start : start + count] = rmat_bits.assemble_ids(dst_planes, scale, num_edges, start, count)
    return src, dst


def check_rmat_options(
    scale: int,
    edge_factor: int,
    num_classes: int,
    feature_dim: int,
    homophily: float,
    feature_noise: float,
    fractions: dict[str, float],
) -> None:
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
    for name, value in fractions.items():
        if not 0.0 <= value <= 1.0:
            _fail(f"{name}_fraction must be in [0, 1], got {value}")
    if sum(fractions.values()) > 1.0 + 1e-9:
        _fail(f"train+val+test fractions add up to {sum(fractions.values()):.3f} > 1")


def community_bounds(num_nodes: int, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(starts, sizes) of the planted communities: contiguous ranges of the R-MAT id space."""
    starts = torch.arange(num_classes + 1, dtype=torch.int64) * num_nodes // num_classes
    return starts, starts[1:] - starts[:-1]


def rewire_edges(
    src: torch.Tensor,
    dst: torch.Tensor,
    draw: torch.Tensor,
    starts: torch.Tensor,
    sizes: torch.Tensor,
    homophily: float,
) -> None:
    """Move the destination of edges whose `draw` < `homophily` into the source's community, in place."""
    rewire = draw < homophily
    c_src = torch.bucketize(src[rewire], starts[1:], right=True)
    c_dst = torch.bucketize(dst[rewire], starts[1:], right=True)
    offset = dst[rewire] - starts[c_dst]
    dst[rewire] = starts[c_src] + offset % sizes[c_src]


def feature_chunk_rows(num_nodes: int, rows: int = 1 << 14) -> int:
    """Rows per feature chunk. `randn` turns uniforms into normals 16 at a time, so a chunk of a
    multiple of 16 values draws exactly what the same rows drawn at once would: any multiple of
    16 rows gives the same bytes (a node count that is not one is drawn whole)."""
    return max(16, rows // 16 * 16) if num_nodes % 16 == 0 else num_nodes


def rmat_feature_chunks(
    generator: torch.Generator, labels: torch.Tensor, centroids: torch.Tensor, noise: float, rows: int
) -> Iterator[tuple[int, torch.Tensor]]:
    """Features in node order, `rows` at a time: class centroid plus Gaussian noise.

    Every chunk is drawn into the same buffer (the same numbers `randn` gives into a new tensor):
    use each before asking for the next. Fresh chunk-sized tensors (64 MiB at most) would each be
    mapped and faulted in afresh, a large share of the drawing's time."""
    num_nodes, feature_dim = labels.numel(), centroids.shape[1]
    size = min(rows, num_nodes)
    drawn, placed = torch.empty(size, feature_dim), torch.empty(size, feature_dim)
    for start in range(0, num_nodes, rows):
        count = min(rows, num_nodes - start)
        chunk = torch.randn(count, feature_dim, generator=generator, out=drawn[:count]).mul_(noise)
        ids = labels[start : start + count].long()  # labels may be stored narrower
        yield start, chunk.add_(torch.index_select(centroids, 0, ids, out=placed[:count]))


def rmat_split(
    generator: torch.Generator, num_nodes: int, fractions: dict[str, float], scale: int
) -> dict[str, torch.Tensor]:
    order = torch.randperm(num_nodes, generator=generator)
    counts = [int(round(f * num_nodes)) for f in fractions.values()]
    if counts[0] == 0:
        _fail(f"train_fraction {fractions['train']} leaves no training node at scale {scale}")
    splits: dict[str, torch.Tensor] = {}
    begin = 0
    for name, count in zip(fractions, counts, strict=True):
        splits[name] = order[begin : begin + count].sort().values
        begin += count
    return splits


def rmat_description(options: dict[str, object]) -> dict[str, object]:
    keys = ("scale", "edge_factor", "num_classes", "feature_dim", "homophily", "feature_noise", "seed")
    return {
        "generator": "rmat",
        **{k: options[k] for k in keys[:2]},
        "rmat_abc": [RMAT_A, RMAT_B, RMAT_C],
        **{k: options[k] for k in keys[2:]},
    }


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
    `synthetic_stream.stream_rmat` draws the same numbers in the same order in chunks, so
    both give the same bytes.
    """
    options = dict(locals())
    fractions = {"train": train_fraction, "val": val_fraction, "test": test_fraction}
    check_rmat_options(scale, edge_factor, num_classes, feature_dim, homophily, feature_noise, fractions)
    num_nodes = 1 << scale

    gen = torch.Generator().manual_seed(seed)
    src, dst = rmat_edges(scale, edge_factor * num_nodes, gen)
    starts, sizes = community_bounds(num_nodes, num_classes)
    rewire_edges(src, dst, torch.rand(src.numel(), generator=gen), starts, sizes, homophily)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    del keep
    relabel = torch.randperm(num_nodes, generator=gen)
    src, dst = torch.index_select(relabel, 0, src), torch.index_select(relabel, 0, dst)
    labels = torch.empty(num_nodes, dtype=torch.int64)
    labels[relabel] = torch.bucketize(torch.arange(num_nodes), starts[1:], right=True)

    centroids = torch.randn(num_classes, feature_dim, generator=gen)
    features = torch.empty(num_nodes, feature_dim)
    rows = feature_chunk_rows(num_nodes)
    for start, chunk in rmat_feature_chunks(gen, labels, centroids, feature_noise, rows):
        features[start : start + chunk.shape[0]] = chunk

    return GraphData(
        num_nodes=num_nodes,
        src=src,
        dst=dst,
        features=features,
        labels=labels,
        splits=rmat_split(gen, num_nodes, fractions, scale),
        origin="synthetic:rmat",
        description=rmat_description(options),
    ).validate()
