"""SegmentRef and attach_tensor: zero-copy views in this and other processes, read-only by default."""

from __future__ import annotations

import gc
import signal
from multiprocessing.connection import Connection

import pytest
import torch
from pydantic import ValidationError

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.shm import SegmentOwner, SegmentRef, attach_tensor

CHILD_PRELUDE = """
import sys
from graphtier.service.shm import SegmentRef, attach_tensor

def mapping_start(path):
    for line in open("/proc/self/maps"):
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].strip() == path:
            return int(parts[0].split("-")[0], 16), parts[1]
    raise SystemExit(f"{path} is not mapped")

ref = SegmentRef.model_validate_json(sys.stdin.readline())
"""


def test_fresh_process_attaches_by_name_without_copying_and_cannot_write(children) -> None:
    with SegmentOwner() as owner:
        segment, table = owner.create_tensor("table", (3, 4), torch.int64)
        table.copy_(torch.arange(12).view(3, 4))
        ref = segment.ref_for(table[1:])
        assert ref.offset == 4 * 8 and ref.shape == (2, 4)

        proc = children.start(
            CHILD_PRELUDE
            + """
t = attach_tensor(ref)
start, perms = mapping_start("/dev/shm/" + ref.name)
print(t.data_ptr() - start, perms, t.flatten().tolist(), flush=True)
sys.stdin.readline()
print(t.flatten().tolist(), flush=True)
sys.stdin.readline()
t[0, 0] = 99  # PROT_READ mapping: this faults
print("wrote", flush=True)
"""
        )
        children.send(proc, ref.model_dump_json())
        offset, perms, values = children.line(proc).split(" ", 2)
        assert int(offset) == ref.offset  # the child's tensor points into its mapping: no copy
        assert perms == "r--s"  # shared, read-only
        assert values == str(list(range(4, 12)))

        table[2] = -1  # written after the child attached: it sees the change only if memory is shared
        children.send(proc)
        assert children.line(proc) == str([4, 5, 6, 7, -1, -1, -1, -1])

        children.send(proc)
        assert proc.wait(timeout=30) in (-signal.SIGSEGV, -signal.SIGBUS)
        assert proc.stdout.read() == ""
        assert table[1, 0].item() == 4


def _fill_writable(conn: Connection, ref_json: str) -> None:
    tensor = attach_tensor(SegmentRef.model_validate_json(ref_json), writable=True)
    tensor.fill_(2.5)
    conn.send(tensor.data_ptr())


def test_writable_attach_writes_through_to_the_owner(children) -> None:
    with SegmentOwner() as owner:
        segment, data = owner.create_tensor("rw", (2, 3), torch.float64)
        proc, conn = children.fork(_fill_writable, segment.ref_for(data[1]).model_dump_json())
        assert conn.recv() != data[1].data_ptr()  # the child used its own mapping, not the inherited one
        proc.join(timeout=30)
        assert proc.exitcode == 0
        assert data.tolist() == [[0.0] * 3, [2.5] * 3]


def test_attached_view_is_zero_copy_and_keeps_its_mapping_alive(mappings) -> None:
    with SegmentOwner() as owner:
        segment, data = owner.create_tensor("alive", (5,), torch.int32)
        data.copy_(torch.arange(5, dtype=torch.int32))
        path = segment.path
        tail = attach_tensor(segment.ref(shape=(3,), dtype="int32", offset=8))
        [(start, perms)] = [m for m in mappings(path) if m[1] == "r--s"]
        assert tail.data_ptr() == start + 8
        piece = tail[1:]  # a view of the view holds the mapping too
        del tail
        gc.collect()
        assert [m for m in mappings(path) if m[1] == "r--s"] == [(start, perms)]
        data[4] = 40
        assert piece.tolist() == [3, 40]
        del piece
        gc.collect()
        assert [m for m in mappings(path) if m[1] == "r--s"] == []


def test_missing_segment_names_it_and_says_the_owner_has_gone() -> None:
    with SegmentOwner() as owner:
        segment = owner.create("gone", 64)
        ref = segment.ref((8,), torch.int64)
    with pytest.raises(SharedMemoryError, match=rf"{segment.name}.*owner has gone"):
        attach_tensor(ref)


def test_reference_past_the_end_reports_the_numbers() -> None:
    with SegmentOwner() as owner:
        segment = owner.create("small", 64)
        too_big = SegmentRef(name=segment.name, offset=32, shape=(2, 3), dtype="int64")
        with pytest.raises(SharedMemoryError, match=r"holds 64 bytes.*\[32, 80\).*\[2, 3\] of int64"):
            attach_tensor(too_big)
        with pytest.raises(SharedMemoryError, match=r"needs bytes \[0, 72\) but segment .* holds 64"):
            segment.view((9,), torch.int64)


def test_empty_tensor_round_trips() -> None:
    with SegmentOwner() as owner:
        segment, empty = owner.create_tensor("empty", (0, 7), torch.float32)
        assert empty.shape == (0, 7)
        assert attach_tensor(segment.ref_for(empty)).shape == (0, 7)


def test_ref_json_round_trip_and_validation() -> None:
    with SegmentOwner() as owner:
        segment = owner.create("json", 128)
        ref = segment.ref((4, 2), "float32", offset=16)
        assert SegmentRef.model_validate_json(ref.model_dump_json()) == ref
        assert (ref.nbytes, ref.numel, ref.torch_dtype) == (32, 8, torch.float32)
        with pytest.raises(ValidationError, match="not a graphtier segment name"):
            SegmentRef(name="../../etc/passwd", offset=0, shape=(1,), dtype="uint8")
        with pytest.raises(ValidationError, match="offset 6 is not a multiple"):
            SegmentRef(name=segment.name, offset=6, shape=(1,), dtype="float32")
        with pytest.raises(ValidationError, match="negative dimension"):
            SegmentRef(name=segment.name, offset=0, shape=(2, -1), dtype="float32")
        with pytest.raises(ValidationError, match="'complex64' is not one of"):
            SegmentRef(name=segment.name, offset=0, shape=(1,), dtype="complex64")
        with pytest.raises(SharedMemoryError, match="does not lie inside segment"):
            segment.ref_for(torch.zeros(2))
