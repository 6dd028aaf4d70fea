"""The synthetic R-MAT graph generated in chunks, under a memory budget, into spill files.

It draws exactly the numbers `synthetic.generate_rmat` draws, in the same order, so the
two give the same graph byte for byte. The bit planes of the R-MAT levels
(`rmat_bits`) go to a spill file; a final pass reads them back chunk by chunk, assembles
the ids, rewires, drops self loops and writes the edges (int32, before the random
relabelling, which is applied on read). Features are drawn only when they are placed, in
chunks (`DrawnRows`: the generator's state is saved and the generator skipped past them
here), so N x F floats are neither held, nor written and read back; a graph whose node
count is not a multiple of 16 (scale < 4) cannot skip exactly and draws them here. The bit planes and the edges stay in
memory when they fit in a share of the working memory: spill only what does not fit.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from numpy.typing import DTypeLike

from graphtier.service.graph.streamed import FileEdges, FileRows, StreamedGraph
from graphtier.service.out_of_core.memory_budget import MemoryPlan
from graphtier.service.out_of_core.spill import MemoryArray, SpillArray, new_array
from graphtier.service.sources import rmat_bits
from graphtier.service.sources import synthetic as rmat

# Working bytes per edge of a chunk: 2 uniforms, masks, 2 x scale unpacked bits, int64 ids.
EDGE_CHUNK_BYTES = 160
KEEP_SHARE = 0.3  # of the working memory: bit planes, edges or features this small stay in memory
FEATURE_CHUNK_OVERHEAD = 3  # a feature chunk, its centroid rows and the spill write


class DrawnRows:
    """The R-MAT features as a row stream that draws them from a saved generator state each time
    it is walked: the bytes `rmat_feature_chunks` gives, without a spill file of N x F floats.
    Every chunk is drawn into the same buffer: use each before asking for the next."""

    def __init__(self, state: torch.Tensor, labels: torch.Tensor, centroids: torch.Tensor, noise: float) -> None:
        narrow = (
            torch.int8 if centroids.shape[0] <= 127 else torch.int16 if centroids.shape[0] <= 32767 else torch.int64
        )
        self.labels = labels.to(
            narrow
        )  # its own copy, 1-2 bytes a node: the graph's labels are freed before this is walked
        self.state, self.centroids, self.noise = state, centroids, noise
        self.num_rows, self.row_shape, self.dtype = labels.numel(), (centroids.shape[1],), np.dtype(np.float32)

    def chunks(self, max_rows: int) -> Iterator[tuple[int, torch.Tensor]]:
        gen = torch.Generator()
        gen.set_state(self.state)
        rows = rmat.feature_chunk_rows(self.num_rows, max_rows)
        yield from rmat.rmat_feature_chunks(gen, self.labels, self.centroids, self.noise, rows)

    def release(self) -> None:
        self.labels = torch.empty(0, dtype=torch.int64)


def skip_uniforms(gen: torch.Generator, count: int, chunk: int = rmat_bits.DRAW_BLOCK) -> None:
    """Advance `gen` past `count` normals drawn by `randn` in blocks of a multiple of 16 values:
    `randn` draws one uniform per value (then transforms them 16 at a time), as `rand` does."""
    if count % 16:
        raise ValueError(f"{count} normals: only whole blocks of 16 draw exactly one uniform each")
    buffer = torch.empty(min(chunk, count))
    for start in range(0, count, chunk):
        torch.rand(min(chunk, count - start), generator=gen, out=buffer[: min(chunk, count - start)])


def stream_rmat(spill_dir: Path, plan: MemoryPlan, **options: object) -> StreamedGraph:
    """`generate_rmat(**options)` as a `StreamedGraph` whose edges and features are spill files."""
    bound = inspect.signature(rmat.generate_rmat).bind(**options)
    bound.apply_defaults()
    opt = dict(bound.arguments)
    scale, edge_factor, num_classes, feature_dim = (
        int(opt[k]) for k in ("scale", "edge_factor", "num_classes", "feature_dim")
    )
    homophily, noise = float(opt["homophily"]), float(opt["feature_noise"])
    fractions = {"train": opt["train_fraction"], "val": opt["val_fraction"], "test": opt["test_fraction"]}
    rmat.check_rmat_options(scale, edge_factor, num_classes, feature_dim, homophily, noise, fractions)
    num_nodes = 1 << scale
    num_edges = edge_factor * num_nodes
    plan.reserve_nodes(num_nodes)
    chunk = plan.units(EDGE_CHUNK_BYTES + 2 * scale, share=KEEP_SHARE, cap=rmat_bits.DEFAULT_CHUNK, multiple=8)
    spill_dir = Path(spill_dir)
    kept: list[str] = []  # what the budget let stay in memory instead of a spill file

    def array(name: str, dtype: DTypeLike, row_shape: tuple[int, ...] = (), *, rows: int) -> SpillArray | MemoryArray:
        nbytes = rows * np.dtype(dtype).itemsize * int(np.prod(row_shape, dtype=np.int64))
        in_memory = plan.fits(nbytes, share=KEEP_SHARE)
        kept.extend([name] if in_memory else [])
        return new_array(spill_dir / f"rmat-{name}", dtype, row_shape, capacity=rows, in_memory=in_memory)

    gen = torch.Generator().manual_seed(int(opt["seed"]))
    plane_rows = scale * rmat_bits.plane_bytes(num_edges)
    src_planes, dst_planes = array("src.bits", np.uint8, rows=plane_rows), array("dst.bits", np.uint8, rows=plane_rows)
    abc = {"a": rmat.RMAT_A, "b": rmat.RMAT_B, "c": rmat.RMAT_C}
    rmat_bits.draw_bit_planes(gen, scale, num_edges, src_planes, dst_planes, chunk=chunk, **abc)

    starts, sizes = rmat.community_bounds(num_nodes, num_classes)
    src_file, dst_file = array("src.i32", np.int32, rows=num_edges), array("dst.i32", np.int32, rows=num_edges)
    for start in range(0, num_edges, chunk):
        count = min(chunk, num_edges - start)
        src = rmat_bits.assemble_ids(src_planes, scale, num_edges, start, count)
        dst = rmat_bits.assemble_ids(dst_planes, scale, num_edges, start, count)
        rmat.rewire_edges(src, dst, torch.rand(count, generator=gen), starts, sizes, homophily)
        keep = src != dst
        src_file.append(src[keep].to(torch.int32))
        dst_file.append(dst[keep].to(torch.int32))
    src_planes.delete()
    dst_planes.delete()
    relabel = torch.randperm(num_nodes, generator=gen)
    labels = torch.empty(num_nodes, dtype=torch.int64)
    labels[relabel] = torch.bucketize(torch.arange(num_nodes), starts[1:], right=True)

    centroids = torch.randn(num_classes, feature_dim, generator=gen)
    plan.refresh()
    feature_rows: FileRows | DrawnRows
    # Drawn again when they are placed whenever they can be (a multiple of 16 rows, see
    # `skip_uniforms`), even when they would fit: N x F floats held through every later step
    # cost more than the draws, in time and in peak memory.
    if num_nodes % 16:
        features = array("features.f32", np.float32, (feature_dim,), rows=num_nodes)
        rows = rmat.feature_chunk_rows(
            num_nodes, plan.units(4 * feature_dim * FEATURE_CHUNK_OVERHEAD, share=0.2, cap=1 << 16)
        )
        for _, block in rmat.rmat_feature_chunks(gen, labels, centroids, noise, rows):
            features.append(block)
        feature_rows = FileRows(features, (feature_dim,), np.float32)
    else:  # drawn when they are placed, instead of held in memory or in a spill file
        feature_rows = DrawnRows(gen.get_state(), labels, centroids, noise)
        skip_uniforms(gen, num_nodes * feature_dim)
        kept.append("features.f32 (drawn again when placed)")
    return StreamedGraph(
        num_nodes=num_nodes,
        edges=FileEdges(src_file, dst_file, relabel),
        features=feature_rows,
        labels=labels,
        splits=rmat.rmat_split(gen, num_nodes, fractions, scale),
        origin="synthetic:rmat",
        description=rmat.rmat_description(opt),
        details={"kept_in_memory": kept, "edge_chunk": chunk},
    )
