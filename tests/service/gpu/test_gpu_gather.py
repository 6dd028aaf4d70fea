"""The GPU tiered gather against the CPU one: same bytes, same counts, every source and row width.

Real device allocations (two "interleaved shares" on one GPU stand for two GPUs), a real
registered /dev/shm mapping for the host tier and a real memory-mapped file for storage.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gpu_marks import needs_cuda

from graphtier.contract.errors import GraphtierError

pytestmark = needs_cuda

ROWS = 3000


@pytest.fixture
def table_parts(tmp_path, request):
    """(table [ROWS, ...] on CPU, host mapping tensor in shm, storage memmap tensor, cleanup)."""
    from graphtier.service.shm import SegmentOwner

    dtype, row_shape, host_end = request.param
    gen = torch.Generator().manual_seed(7)
    table = (torch.randn((ROWS, *row_shape), generator=gen) * 100).to(dtype)
    owner = SegmentOwner()
    _, resident = owner.create_tensor("gpu-test-resident", (host_end, *row_shape), dtype)
    resident.copy_(table[:host_end])
    path = tmp_path / "storage.bin"
    table[host_end:].contiguous().view(torch.uint8).numpy().tofile(path)
    storage = torch.from_numpy(np.fromfile(path, dtype=np.uint8)).view(dtype).view(ROWS - host_end, *row_shape)
    yield table, resident, storage, host_end
    owner.close()


def _tiers(table, resident, storage, host_end, rep, inter, nd, device_index, allocs, drop_share=None):
    from graphtier.service.gpu.gather import CudaFeatureTiers
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.memory.device_ipc import DeviceAllocation

    rows = table.reshape(ROWS, -1).view(torch.uint8)

    def place(part):
        part = part.contiguous()
        alloc = DeviceAllocation(0, max(part.numel(), 1), "test tier")
        if part.numel():
            alloc.copy_from_host(0, part.data_ptr(), part.numel())
        allocs.append(alloc)
        return alloc.ptr

    shares = [place(rows[rep + j : inter : nd]) for j in range(nd)]
    if drop_share is not None:
        shares[drop_share] = 0
    reg = host_registry().register(
        resident.data_ptr(), resident.numel() * resident.element_size(), "test host", read_only=False
    )  # the owner's own, writable mapping
    allocs.append(reg)
    return CudaFeatureTiers(
        device=torch.device("cuda", 0),
        replicated_end=rep,
        interleaved_end=inter,
        host_end=host_end,
        num_rows=ROWS,
        num_devices=nd,
        device_index=device_index,
        dtype=table.dtype,
        row_shape=tuple(table.shape[1:]),
        replicated_ptr=place(rows[:rep]) if rep else 0,
        interleaved_ptrs=tuple(shares),
        host_ptr=resident.data_ptr(),
        storage=storage,
    )


def _release(allocs):
    from graphtier.service.gpu.host_registry import host_registry
    from graphtier.service.memory.device_ipc import DeviceAllocation

    for a in allocs:
        if isinstance(a, DeviceAllocation):
            a.close()
        else:
            host_registry().release(a)


def _cpu_reference(table, ids, host_end, rep, inter, nd, device_index):
    from graphtier.service.gather import FeatureTiers, tiered_gather

    tiers = FeatureTiers.from_table(
        table, replicated_end=rep, interleaved_end=inter, host_end=host_end, num_devices=nd, device_index=device_index
    )
    out = torch.empty((ids.numel(), *table.shape[1:]), dtype=table.dtype)
    return out, tiered_gather(ids, tiers, out, backend="torch")


WIDTHS = [
    (torch.float32, (128,), 2400),  # 512 B: whole lines
    (torch.float32, (100,), 2400),  # 400 B: rows start mid-line
    (torch.float32, (25,), 2000),  # 100 B: 4-byte but not 16-byte aligned rows
    (torch.float16, (3,), 2800),  # 6 B: byte path
    (torch.bfloat16, (300,), 3000),  # no storage tier
]


@pytest.mark.parametrize("table_parts", WIDTHS, indirect=True, ids=lambda p: f"{p[0]}x{p[1][0]}")
@pytest.mark.parametrize("ids_on", ["cpu", "cuda"])
def test_gpu_gather_is_bit_identical_to_the_cpu_gather(table_parts, ids_on):
    from graphtier.service.gpu.gather import CudaGather

    table, resident, storage, host_end = table_parts
    rep, inter, nd = 300, 300 + 2 * 450, 2
    allocs: list = []
    try:
        tiers = _tiers(table, resident, storage, host_end, rep, inter, nd, 1, allocs)
        ids = torch.randint(0, ROWS, (5000,), generator=torch.Generator().manual_seed(3))
        expected, counts = _cpu_reference(table, ids, host_end, rep, inter, nd, 1)
        out = torch.full((ids.numel() + 7, *table.shape[1:]), float("nan"), dtype=table.dtype, device="cuda")
        for grid in ({}, {"sm_share": 0.1}, {"max_threads": None}):
            gather = CudaGather(tiers, **grid)
            got = gather.gather(ids.to(ids_on), out)
            torch.cuda.synchronize()
            assert torch.equal(out[: ids.numel()].cpu().view(torch.uint8), expected.view(torch.uint8))
            assert out[ids.numel() :].isnan().all(), "rows past the batch were written"
            assert got.simulated is False
            assert got.by_source() == counts.by_source()
            assert got.host.rows > 0 and got.interleaved_peer.rows > 0 and got.replicated.rows > 0
            assert gather.take_counts().by_source() == counts.by_source(), "the kernel's own counts differ"
            out.fill_(float("nan"))
            gather.gather_device(ids.cuda(), out)  # the GPU sampler's path: nothing read back but storage ids
            assert torch.equal(out[: ids.numel()].cpu().view(torch.uint8), expected.view(torch.uint8))
            assert gather.take_counts().by_source() == counts.by_source()
    finally:
        _release(allocs)


@pytest.mark.parametrize("table_parts", [WIDTHS[1]], indirect=True, ids=["400B"])
def test_an_unreachable_peer_share_is_read_from_the_host_copy_and_counted_as_host(table_parts):
    from graphtier.service.gpu.gather import CudaGather

    table, resident, storage, host_end = table_parts
    allocs: list = []
    try:
        tiers = _tiers(table, resident, storage, host_end, 100, 100 + 3 * 200, 3, 0, allocs, drop_share=2)
        ids = torch.arange(ROWS).flip(0)
        expected, counts = _cpu_reference(table, ids, host_end, 100, 700, 3, 0)
        out = torch.empty((ROWS, *table.shape[1:]), dtype=table.dtype, device="cuda")
        got = CudaGather(tiers).gather(ids, out)
        assert torch.equal(out.cpu(), expected)
        assert got.interleaved_local == counts.interleaved_local
        assert got.interleaved_peer.rows == counts.interleaved_peer.rows - 200
        assert got.host.rows == counts.host.rows + 200
    finally:
        _release(allocs)


@pytest.mark.parametrize("table_parts", [WIDTHS[0]], indirect=True, ids=["512B"])
def test_bad_ids_and_outputs_are_refused_naming_them(table_parts):
    from graphtier.service.gpu.gather import CudaGather

    table, resident, storage, host_end = table_parts
    allocs: list = []
    try:
        gather = CudaGather(_tiers(table, resident, storage, host_end, 0, 0, 1, 0, allocs))
        out = torch.empty((4, 128), device="cuda")
        with pytest.raises(GraphtierError, match=r"id 3000 at position 2 is out of range \[0, 3000\)"):
            gather.gather(torch.tensor([1, 2, 3000, 4], device="cuda"), out)
        with pytest.raises(GraphtierError, match="id -1 at position 0"):
            gather.gather(torch.tensor([-1]), out)
        with pytest.raises(GraphtierError, match="out is"):
            gather.gather(torch.arange(5), out)
        with pytest.raises(GraphtierError, match="contiguous tensor on cuda:0"):
            gather.gather(torch.arange(2), torch.empty((4, 128)))
        with pytest.raises(GraphtierError, match="1-D int64"):
            gather.gather(torch.arange(2, dtype=torch.int32), out)
        gather.gather_device(torch.tensor([1, 3000, 2], device="cuda"), out)  # skipped, then reported
        with pytest.raises(GraphtierError, match=r"1 ids out of range \[0, 3000\) .*one of them: 3000"):
            gather.take_counts()
    finally:
        _release(allocs)
