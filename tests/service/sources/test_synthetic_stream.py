"""The chunked R-MAT generator: the reference draws, in memory or streamed to spill files."""

import numpy as np
import pytest
import torch

from graphtier.service.out_of_core.memory_budget import MemoryPlan
from graphtier.service.sources import rmat_bits
from graphtier.service.sources.synthetic import generate_rmat, rmat_edges, rmat_feature_chunks
from graphtier.service.sources.synthetic_stream import stream_rmat


def _reference_rmat_edges(scale, num_edges, generator, a, b, c):
    """The level-major generator as first written: whole-array draws and int64 updates per level."""
    ab, c_norm, a_norm = a + b, c / (1.0 - a - b), a / (a + b)
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


@pytest.mark.parametrize(
    "scale, num_edges, abc",
    [
        (3, 5, (0.57, 0.19, 0.19)),
        (12, 50_001, (0.57, 0.19, 0.19)),
        (9, 4096, (0.25, 0.25, 0.25)),
        (14, 70_000, (0.45, 0.15, 0.3)),
        (21, 3001, (0.57, 0.19, 0.19)),
        (32, 999, (0.57, 0.19, 0.19)),
    ],
)
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_bit_plane_generator_draws_what_the_reference_draws(scale, num_edges, abc):
    a, b, c = abc
    want = _reference_rmat_edges(scale, num_edges, torch.Generator().manual_seed(5), a, b, c)
    got = rmat_edges(scale, num_edges, torch.Generator().manual_seed(5), a=a, b=b, c=c)
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])
    planes = rmat_bits.MemoryPlanes(), rmat_bits.MemoryPlanes()
    rmat_bits.draw_bit_planes(torch.Generator().manual_seed(5), scale, num_edges, *planes, a=a, b=b, c=c, chunk=24)
    start, count = 8 * (num_edges // 24), num_edges - 8 * (num_edges // 24)  # an odd-sized tail chunk
    assert torch.equal(rmat_bits.assemble_ids(planes[0], scale, num_edges, start, count), want[0][start:])


def test_features_in_chunks_of_16_rows_are_the_rows_drawn_at_once():
    labels = torch.randint(0, 4, (256,), generator=torch.Generator().manual_seed(0))
    centroids = torch.randn(4, 7)
    whole = torch.randn(256, 7, generator=torch.Generator().manual_seed(1)).mul_(3.0).add_(centroids[labels])
    for rows in (16, 48, 256):
        parts = rmat_feature_chunks(torch.Generator().manual_seed(1), labels, centroids, 3.0, rows)
        assert torch.equal(torch.cat([chunk.clone() for _, chunk in parts]), whole)  # each chunk reuses one buffer


@pytest.mark.parametrize(
    "options, work",
    [
        ({"scale": 3, "feature_dim": 3, "num_classes": 2}, 100),
        ({"scale": 10, "feature_dim": 8}, 20_000),
        ({"scale": 11, "feature_dim": 5, "seed": 3, "homophily": 0.3, "edge_factor": 5}, 1 << 30),
    ],
)
def test_streamed_generator_gives_the_in_memory_graph(tmp_path, options, work):
    plan = MemoryPlan.start(1 << 40, work_bytes=work)
    streamed = stream_rmat(tmp_path, plan, **options)
    whole = generate_rmat(**options)
    src, dst = (torch.cat(part) for part in zip(*streamed.edges.chunks(777), strict=True))
    assert torch.equal(src, whole.src) and torch.equal(dst, whole.dst)
    for rows in (100, 5000):  # walked twice: features drawn again each time give the same rows
        assert torch.equal(torch.cat([block.clone() for _, block in streamed.features.chunks(rows)]), whole.features)
    assert torch.equal(streamed.labels, whole.labels) and streamed.description == whole.description
    assert streamed.splits.keys() == whole.splits.keys()
    assert all(torch.equal(streamed.splits[k], whole.splits[k]) for k in whole.splits)
    kept = streamed.details["kept_in_memory"]
    # drawn again whenever the rows are a multiple of 16 (scale >= 4), held or spilled otherwise
    drawn = ["features.f32 (drawn again when placed)"] if options["scale"] >= 4 else []
    assert kept == ([] if work < 1 << 20 else ["src.bits", "dst.bits", "src.i32", "dst.i32"]) + drawn
    spilled = sorted(
        f"rmat-{name}"
        for name in ("dst.i32", "features.f32", "src.i32")
        if name not in kept and not (drawn and name == "features.f32")
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == spilled  # the bit planes are gone once assembled
    if "rmat-src.i32" in spilled:
        assert np.fromfile(tmp_path / "rmat-src.i32", np.int32).size == whole.num_edges
    streamed.edges.release()
    streamed.features.release()
    assert list(tmp_path.iterdir()) == []
