"""tiered_gather: native and torch give the same bytes and counts, equal to a numpy reference."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.gather import FeatureTiers, tiered_gather
from graphtier.service.native_ops import native_available, unavailable_reason

BACKENDS = [
    "torch",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(not native_available(), reason=f"native ops not built: {unavailable_reason()}"),
    ),
]

# (replicated_end, interleaved_end, host_end) for a 200-row table, incl. empty tiers
LAYOUTS = [(20, 90, 150), (0, 0, 200), (0, 0, 0), (200, 200, 200), (0, 120, 120), (30, 30, 170), (50, 200, 200)]


def numpy_counts(ids: np.ndarray, bounds: tuple[int, int, int], num_devices: int, device_index: int) -> list[int]:
    rep, inter, host = bounds
    interleaved = ids[(ids >= rep) & (ids < inter)]
    local = int(np.count_nonzero((interleaved - rep) % num_devices == device_index))
    return [
        int(np.count_nonzero(ids < rep)),
        local,
        interleaved.size - local,
        int(np.count_nonzero((ids >= inter) & (ids < host))),
        int(np.count_nonzero(ids >= host)),
    ]


def make_table(dtype: torch.dtype, rows: int = 200) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        return torch.randn(rows, 3, 5, generator=g).to(dtype)
    return torch.randint(-(2**40), 2**40, (rows, 7), generator=g, dtype=dtype)


# Each layout with one dtype in turn: the op copies bytes, so a dtype only sets the row width.
DTYPES = [torch.float16, torch.int64, torch.float32]
LAYOUT_DTYPES = [(layout, DTYPES[i % len(DTYPES)]) for i, layout in enumerate(LAYOUTS)]


@pytest.mark.parametrize(("layout", "dtype"), LAYOUT_DTYPES, ids=[f"{b}-{d}" for b, d in LAYOUT_DTYPES])
@pytest.mark.parametrize(("num_devices", "device_index"), [(1, 0), (4, 0), (4, 3)])
def test_backends_agree_with_reference(
    layout: tuple[int, int, int], num_devices: int, device_index: int, dtype: torch.dtype
) -> None:
    table = make_table(dtype)
    tiers = FeatureTiers.from_table(
        table,
        replicated_end=layout[0],
        interleaved_end=layout[1],
        host_end=layout[2],
        num_devices=num_devices,
        device_index=device_index,
    )
    ids = torch.randint(0, 200, (3000,), generator=torch.Generator().manual_seed(sum(layout)))
    want_rows = numpy_counts(ids.numpy(), layout, num_devices, device_index)
    outputs = []
    for backend in ["torch"] + (["native"] if native_available() else []):
        out = torch.full((3100, 3, 5) if dtype.is_floating_point else (3100, 7), 7, dtype=dtype)
        counts = tiered_gather(ids, tiers, out, backend=backend)
        assert [t.rows for t in counts.by_source().values()] == [*want_rows, 0]  # a local gather: no network rows
        assert counts.total_bytes == 3000 * tiers.row_bytes and counts.simulated
        assert torch.equal(out[:3000], table[ids])
        assert (out[3000:] == 7).all()  # rows past len(ids) untouched
        outputs.append((out, counts))
    for out, counts in outputs[1:]:
        assert torch.equal(out, outputs[0][0]) and counts == outputs[0][1]


@pytest.mark.parametrize("backend", BACKENDS)
def test_storage_tier_is_a_memory_mapped_file(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "storage.bin"
    table = torch.arange(100 * 16, dtype=torch.float32).view(100, 16)
    storage = torch.from_file(str(path), shared=True, size=40 * 16, dtype=torch.float32).view(40, 16)
    storage.copy_(table[60:])
    tiers = FeatureTiers(
        replicated_end=10,
        interleaved_end=30,
        host_end=60,
        num_rows=100,
        num_devices=2,
        device_index=1,
        resident=table[:60].clone(),
        storage=storage,
    )
    ids = torch.tensor([99, 0, 59, 60, 15, 16, 45])
    out = torch.empty(7, 16)
    counts = tiered_gather(ids, tiers, out, backend=backend)
    assert torch.equal(out, table[ids])
    assert counts.to_dict()["storage"] == {"rows": 2, "bytes": 128}
    rows = [t.rows for t in counts.by_source().values()]
    assert rows == [1, 1, 1, 2, 2, 0]  # 0 | 15 (local: (15-10)%2 == 1) | 16 | 45, 59 | 60, 99


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_ids_and_outputs(backend: str) -> None:
    tiers = FeatureTiers.from_table(torch.zeros(50, 4), replicated_end=5, interleaved_end=10, host_end=30)
    out = torch.empty(10, 4)
    with pytest.raises(GraphtierError, match="id 50 at position 2 is out of range"):
        tiered_gather(torch.tensor([1, 49, 50, 3]), tiers, out, backend=backend)
    with pytest.raises(GraphtierError, match="id -3 at position 0"):
        tiered_gather(torch.tensor([-3]), tiers, out, backend=backend)
    # a bad id at the end of a batch large enough to be gathered in parallel: no row was written
    many = torch.randint(0, 50, (40000,), generator=torch.Generator().manual_seed(3))
    many[-1] = 50
    untouched = torch.full((40000, 4), 7.0)
    with pytest.raises(GraphtierError, match="id 50 at position 39999 is out of range"):
        tiered_gather(many, tiers, untouched, backend=backend)
    assert (untouched == 7.0).all()
    with pytest.raises(GraphtierError, match="fewer than the 11 ids"):
        tiered_gather(torch.zeros(11, dtype=torch.int64), tiers, out, backend=backend)
    with pytest.raises(GraphtierError, match="float64"):
        tiered_gather(torch.tensor([1]), tiers, torch.empty(2, 4, dtype=torch.float64), backend=backend)
    with pytest.raises(GraphtierError, match=r"\(5,\)"):
        tiered_gather(torch.tensor([1]), tiers, torch.empty(2, 5), backend=backend)
    with pytest.raises(GraphtierError, match="integer"):
        tiered_gather(torch.tensor([1.0]), tiers, out, backend=backend)
    assert tiered_gather(torch.empty(0, dtype=torch.int64), tiers, out, backend=backend).total_rows == 0


@pytest.mark.skipif(not native_available(), reason="native ops not built")
@pytest.mark.parametrize("dim", [48, 64])
def test_native_large_parallel_gather_counts_merge(dim: int) -> None:
    # 48 or 64 MiB of rows, beyond the caches. Rows of 192 B take the generic loop, whose batches of
    # 32,768 ids or more are read region by region; rows of 256 B the kernel for their width, in batch order.
    rows = 262144
    table = torch.arange(rows * dim, dtype=torch.float32).view(rows, dim)
    tiers = FeatureTiers.from_table(
        table, replicated_end=5000, interleaved_end=20000, host_end=200000, num_devices=3, device_index=2
    )
    random_ids = torch.randint(0, rows, (100000,), generator=torch.Generator().manual_seed(1))
    # Random ids are read grouped by table region, sorted ones in batch order without grouping:
    # the bytes are the same either way, also when one descent (inside a chunk of the passes
    # over the ids, or between two of them: 16,384 ids each) triggers it.
    sorted_ids = random_ids.sort().values
    one_descent = sorted_ids.clone()
    one_descent[39999], one_descent[40000] = sorted_ids[40000] + 1, sorted_ids[40000]
    descent_between_chunks = sorted_ids.clone()
    descent_between_chunks[16384] = sorted_ids[16383] - 1
    repeated = torch.cat([random_ids[:50000], random_ids[:50000].flip(0)])
    edges = torch.tensor([0, rows - 1, 4999, 5000, 19999, 20000, 199999, 200000] * 12500)
    out = torch.empty(100000, dim)
    before = torch.get_num_threads()
    try:
        for threads, ids in [
            (1, random_ids),
            (2, random_ids),
            (3, random_ids),
            (2, sorted_ids),
            (2, one_descent),
            (2, descent_between_chunks),
            (2, repeated),
            (2, edges),
        ]:
            torch.set_num_threads(threads)
            out.zero_()
            counts = tiered_gather(ids, tiers, out, backend="native")
            want = numpy_counts(ids.numpy(), (5000, 20000, 200000), 3, 2)
            assert [t.rows for t in counts.by_source().values()] == [*want, 0]
            assert torch.equal(out, table[ids])
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not native_available(), reason="native ops not built")
@pytest.mark.parametrize("dim", [128, 256, 96])
def test_native_large_gather_of_each_row_width(dim: int) -> None:
    """Rows of 512 B and 1 KiB into an output beyond the caches take the kernels compiled for their
    width (256 B: the test above), 384 B the generic copy: the same bytes, grouped or in batch
    order, from both parts of the table."""
    rows = 20000
    table = torch.arange(rows * dim, dtype=torch.float32).view(rows, dim)
    tiers = FeatureTiers.from_table(table, replicated_end=100, interleaved_end=1000, host_end=15000)
    random_ids = torch.randint(0, rows, (40000,), generator=torch.Generator().manual_seed(dim))
    out = torch.empty(40000, dim)
    before = torch.get_num_threads()
    try:
        for threads, ids in [(2, random_ids), (1, random_ids), (2, random_ids.sort().values)]:
            torch.set_num_threads(threads)
            out.zero_()
            counts = tiered_gather(ids, tiers, out, backend="native")
            assert torch.equal(out, table[ids])
            assert counts.by_source()["storage"].rows == int((ids >= 15000).sum())
    finally:
        torch.set_num_threads(before)


@pytest.mark.skipif(not native_available(), reason="native ops not built")
def test_native_gather_into_unaligned_output() -> None:
    """An output that is not 64-byte aligned (a view one row of 16 B in) takes the cached copy."""
    table = torch.randn(70000, 128)
    tiers = FeatureTiers.from_table(table, replicated_end=0, interleaved_end=0, host_end=70000)
    ids = torch.randint(0, 70000, (40000,), generator=torch.Generator().manual_seed(2))
    flat = torch.zeros(40001 * 128 + 4)
    out = flat[4 : 4 + 40000 * 128].view(40000, 128)  # 16 bytes past an aligned start
    tiered_gather(ids, tiers, out, backend="native")
    assert torch.equal(out, table[ids]) and (flat[:4] == 0).all() and (flat[4 + 40000 * 128 :] == 0).all()


@pytest.mark.skipif(not native_available(), reason="native ops not built")
def test_native_gathers_on_two_threads_at_once() -> None:
    """Two gathers at once share one pool of helpers: whichever finds it busy runs a pass on its
    own thread, also when the pass before ran in chunks on the pool, and its bytes stay right
    (grouping keys written into slots another split had counted once overran their buffer)."""
    rows, dim = 262144, 48  # rows of 192 B: batches of 32,768 ids or more are grouped
    table = torch.arange(rows * dim, dtype=torch.float32).view(rows, dim)
    tiers = FeatureTiers.from_table(table, replicated_end=0, interleaved_end=0, host_end=rows)
    batches = [torch.randint(0, rows, (33000,), generator=torch.Generator().manual_seed(s)) for s in range(2)]
    wrong: list[int] = []

    def gather_repeatedly(ids: torch.Tensor) -> None:
        out, want = torch.empty(ids.numel(), dim), table[ids]
        for attempt in range(200):
            tiered_gather(ids, tiers, out, backend="native")
            if not torch.equal(out, want):
                wrong.append(attempt)

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        threads = [threading.Thread(target=gather_repeatedly, args=(ids,)) for ids in batches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        torch.set_num_threads(before)
    assert not wrong
