"""The GPU gather's index math on the CPU: `CudaGather`'s own code (sorting, pinned staging, the
storage boundary, the counters) over CPU tensors, with the kernel re-stated thread by thread
(gather_emulation.py) reading real memory, gives exactly the CPU gather's rows and counts."""

from __future__ import annotations

import pytest
import torch
from gather_emulation import EmulatedTable

from graphtier.contract.errors import GraphtierError
from graphtier.service.gpu.gather import GATHER_MAX_THREADS, GATHER_THREADS, THREADS_PER_SM, gather_grid

ROWS = 600


class Table(EmulatedTable):
    """A ROWS-row random feature table laid out as the GPU sees it, on the CPU."""

    def __init__(self, dtype, row_shape, host_end, rep, inter, nd, device_index, *, drop_share=None):
        gen = torch.Generator().manual_seed(7)
        table = (torch.randn((ROWS, *row_shape), generator=gen) * 100).to(dtype)
        super().__init__(table, host_end, rep, inter, nd, device_index, drop_share=drop_share)


WIDTHS = [
    (torch.float32, (128,), 480),  # 512 B: whole lines
    (torch.float32, (100,), 480),  # 400 B: rows start mid-line
    (torch.float32, (25,), 400),  # 100 B: 4-byte but not 16-byte aligned rows
    (torch.float16, (3,), 560),  # 6 B: the byte path
    (torch.bfloat16, (300,), ROWS),  # 600 B, no storage tier
]
IDS = torch.randint(0, ROWS, (300,), generator=torch.Generator().manual_seed(3))


def _same_bytes(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return torch.equal(got.contiguous().view(torch.uint8), expected.contiguous().view(torch.uint8))


@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"{w[0]}x{w[1][0]}")
def test_host_ids_gather_the_cpu_gathers_rows_and_counts_and_the_device_counters_agree(width):
    dtype, shape, host_end = width
    table = Table(dtype, shape, host_end, 60, 60 + 2 * 90, 2, 1)
    gather, kernel = table.gather()
    expected, counts = table.expected(IDS)
    out = table.empty_out(IDS.numel())
    got = gather.gather(IDS, out)
    assert _same_bytes(out[: IDS.numel()], expected)
    assert out[IDS.numel() :].isnan().all(), "rows past the batch were written"
    assert got.by_source() == counts.by_source() and got.simulated is False
    assert got.replicated.rows and got.interleaved_local.rows and got.interleaved_peer.rows and got.host.rows
    assert gather.take_counts().by_source() == counts.by_source()  # what the kernel counted on the device
    assert gather.take_counts().total_rows == 0, "the counters are zeroed when read"
    assert len(kernel.launches) == 1, "one launch per batch"
    # the capped host blocks read every host and storage row, the device blocks every device row
    assert kernel.part_sources["device"][3:] == [0, 0, 0] and kernel.part_sources["host"][:3] == [0, 0, 0]


@pytest.mark.parametrize("width", [WIDTHS[1], WIDTHS[3], WIDTHS[4]], ids=["400B", "6B", "600B-no-storage"])
def test_device_ids_gather_the_same_rows_and_count_them_on_the_device(width):
    dtype, shape, host_end = width
    table = Table(dtype, shape, host_end, 30, 30 + 3 * 50, 3, 2)
    gather, kernel = table.gather()
    expected, counts = table.expected(IDS)
    for _ in range(2):  # two batches: the counters accumulate, the staging buffers take turns
        out = table.empty_out(IDS.numel())
        gather.gather_device(IDS, out)
        assert _same_bytes(out[: IDS.numel()], expected)
    assert gather.take_counts().by_source() == (counts + counts).by_source()
    assert len(kernel.launches) == 2


@pytest.mark.parametrize("max_threads", [GATHER_THREADS, None])
@pytest.mark.parametrize("order_seed", [1, 2])
def test_the_rows_do_not_depend_on_the_grid_or_the_order_threads_run_in(max_threads, order_seed):
    table = Table(torch.float32, (100,), 480, 60, 240, 2, 0)
    gather, kernel = table.gather(max_threads=max_threads, order_seed=order_seed)
    expected, _ = table.expected(IDS)
    out = table.empty_out(IDS.numel())
    gather.gather(IDS, out)
    assert _same_bytes(out[: IDS.numel()], expected)
    full = THREADS_PER_SM // GATHER_THREADS  # one emulated SM
    assert kernel.launches[0]["device_blocks"] == full
    assert kernel.launches[0]["host_blocks"] == (1 if max_threads else full)


def test_an_unreachable_peer_share_is_read_from_the_host_copy_and_counted_as_host():
    table = Table(torch.float32, (100,), 480, 20, 20 + 3 * 60, 3, 0, drop_share=2)
    gather, _ = table.gather()
    ids = torch.arange(ROWS).flip(0)
    expected, counts = table.expected(ids)
    out = table.empty_out(ROWS)
    got = gather.gather(ids, out)
    assert _same_bytes(out[:ROWS], expected)
    assert got.interleaved_peer.rows == counts.interleaved_peer.rows - 60
    assert got.host.rows == counts.host.rows + 60
    assert gather.take_counts() == got


def test_device_ids_out_of_range_are_skipped_and_reported_when_the_counts_are_read():
    table = Table(torch.float32, (25,), 400, 0, 0, 1, 0)
    gather, _ = table.gather()
    ids = torch.tensor([5, ROWS + 7, 450, -3, 10])
    expected, _ = table.expected(torch.tensor([5, 450, 10]))
    out = table.empty_out(ids.numel())
    gather.gather_device(ids, out)
    assert _same_bytes(out[[0, 2, 4]], expected)
    assert out[[1, 3]].isnan().all(), "a bad id's output row was written"
    with pytest.raises(GraphtierError, match=r"2 ids out of range \[0, 600\) were skipped .*\(one of them: (-3|607)\)"):
        gather.take_counts()
    assert gather.take_counts().total_rows == 0


def test_host_ids_out_of_range_are_refused_before_any_launch_naming_them():
    table = Table(torch.float32, (25,), 400, 0, 0, 1, 0)
    gather, kernel = table.gather()
    with pytest.raises(GraphtierError, match=r"id 600 at position 2 is out of range \[0, 600\)"):
        gather.gather(torch.tensor([1, 2, ROWS, 4]), table.empty_out(4))
    with pytest.raises(GraphtierError, match="out is"):
        gather.gather(torch.arange(9), table.empty_out(4))
    with pytest.raises(GraphtierError, match="1-D int64"):
        gather.gather_device(torch.arange(2, dtype=torch.int32), table.empty_out(2))
    assert kernel.launches == []


def test_host_reads_are_capped_by_default_device_reads_get_a_full_grid_and_a_share_caps_both():
    full = 132 * THREADS_PER_SM // GATHER_THREADS  # H100 SXM: 528 blocks of 512
    assert GATHER_MAX_THREADS == 10_240
    assert gather_grid(132) == (full, GATHER_MAX_THREADS // GATHER_THREADS)  # host: 20 blocks, not 528
    assert gather_grid(132, max_threads=None) == (full, full)
    assert gather_grid(132, sm_share=0.1) == (53 - 20, 20)  # 10% of the threads: 53 blocks in all
    assert gather_grid(132, sm_share=0.02) == (1, 11)
    assert gather_grid(2) == (8, 8)  # never more than a full grid
    with pytest.raises(GraphtierError, match=r"sm_share must be in \(0, 1\]"):
        gather_grid(132, sm_share=1.5)
    with pytest.raises(GraphtierError, match="at least one block of 512 threads"):
        gather_grid(132, max_threads=100)
