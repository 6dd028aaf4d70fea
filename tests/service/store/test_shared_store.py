"""A prepared dataset loaded into shm tiers, attached from other processes without copying."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.shm import SegmentOwner
from graphtier.service.store import SharedDatasetHandle, SharedDatasetStore, attach_dataset


def _plan(ds, *, host_fraction=0.8):
    n, row_bytes = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        device_replicated_bytes=n * row_bytes // 20,
        device_interleaved_bytes=n * row_bytes // 10,
        num_devices=2,
        host_bytes=int(n * row_bytes * (host_fraction - 0.15)),
        structure_device_bytes=0,
    )
    return PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes)


def _run_child(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_attach_in_another_process_sees_the_same_bytes(small_rmat):
    plan = _plan(small_rmat)
    assert 0 < plan.replicated_end < plan.interleaved_end < plan.host_end < plan.num_nodes
    with SharedDatasetStore(small_rmat, plan) as store:
        ids = torch.randperm(plan.num_nodes, generator=torch.Generator().manual_seed(1))[:700]
        child = _run_child(
            """
            import sys, json, torch
            from graphtier.service.store import SharedDatasetHandle, attach_dataset
            handle = SharedDatasetHandle.model_validate_json(sys.argv[1])
            ds = attach_dataset(handle)
            ids = torch.tensor(json.loads(sys.argv[2]))
            out = torch.empty(len(ids), ds.resident.shape[1])
            counts = ds.gather(ids, out, device_index=1)
            print(json.dumps({"sum": float(out.double().sum()), "counts": counts.to_dict(),
                              "colptr_last": int(ds.graph.colptr[-1]), "train": ds.splits["train"].tolist()[:5]}))
            """,
            store.handle.model_dump_json(),
            json.dumps(ids.tolist()),
        )
        assert child.returncode == 0, child.stderr
        got = json.loads(child.stdout)
    expected = small_rmat.features[ids]
    assert got["sum"] == pytest.approx(float(expected.double().sum()), rel=1e-9)
    assert got["colptr_last"] == small_rmat.graph.num_edges
    assert got["train"] == small_rmat.split("train").tolist()[:5]
    tiers = plan.tier_of(ids)
    counts = got["counts"]
    total_rows = sum(v["rows"] for v in counts.values() if isinstance(v, dict))
    assert total_rows == len(ids)
    assert counts["storage"]["rows"] == int((ids >= plan.host_end).sum())
    assert counts["host"]["rows"] == int(((ids >= plan.interleaved_end) & (ids < plan.host_end)).sum())
    assert counts["replicated"]["rows"] == int((ids < plan.replicated_end).sum())
    inter = ids[(ids >= plan.replicated_end) & (ids < plan.interleaved_end)]
    local = int(((inter - plan.replicated_end) % 2 == 1).sum())
    assert counts["interleaved_local"]["rows"] == local
    assert counts["interleaved_peer"]["rows"] == inter.numel() - local
    assert tiers.numel() == len(ids)


def _mapped_file(address: int) -> str:
    """The file backing the mapping of this process that holds `address` (from /proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return fields[5] if len(fields) > 5 else ""
    return ""


def test_views_are_zero_copy(small_rmat):
    plan = _plan(small_rmat, host_fraction=1.0)
    with SharedDatasetStore(small_rmat, plan) as store:
        attached = attach_dataset(SharedDatasetHandle.model_validate_json(store.handle.model_dump_json()))
        for tensor, ref in (
            (attached.resident, store.handle.resident_features),
            (attached.graph.row, store.handle.row),
        ):
            # the consumer's tensor lies in a mapping of the daemon's segment file itself: no copy
            assert _mapped_file(tensor.data_ptr()) == f"/dev/shm/{ref.name}"
        assert torch.equal(attached.resident, small_rmat.features[: plan.host_end])
        del attached


def test_attach_after_owner_closed_names_the_segment(small_rmat):
    with SharedDatasetStore(small_rmat, _plan(small_rmat)) as store:
        handle = store.handle
    with pytest.raises(SharedMemoryError, match=handle.colptr.name):
        attach_dataset(handle)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_owner_killed_leaves_segments_that_the_next_owner_reclaims(small_rmat):
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
            import sys, time
            from graphtier.service.prepared import PreparedDataset
            from graphtier.service.placement import PlacementPlan
            from graphtier.service.store import SharedDatasetStore
            ds = PreparedDataset.open("rmat12", {str(small_rmat.directory.parent)!r})
            plan = PlacementPlan.model_validate_json(sys.argv[1])
            store = SharedDatasetStore(ds, plan)
            print(store.handle.model_dump_json(), flush=True)
            time.sleep(120)
            """
            ),
            _plan(small_rmat).model_dump_json(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        handle = SharedDatasetHandle.model_validate_json(child.stdout.readline())
        assert os.path.exists(f"/dev/shm/{handle.row.name}")
        attached = attach_dataset(handle)
        assert int(attached.graph.colptr[-1]) == small_rmat.graph.num_edges
        del attached
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    assert os.path.exists(f"/dev/shm/{handle.row.name}"), "SIGKILL gives the owner no chance to clean up"
    with SegmentOwner():
        pass  # a new owner reclaims the dead owner's segments on creation
    assert not os.path.exists(f"/dev/shm/{handle.row.name}")


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_owner_keeps_no_second_copy_mapped(small_rmat):
    """After copying into shm, the owner drops its mappings of the dataset files (a fresh process, so
    no other test's mapping of the same file counts)."""
    child = _run_child(
        """
        import gc, sys
        from graphtier.service.placement import PlacementPlan
        from graphtier.service.prepared import PreparedDataset
        from graphtier.service.store import SharedDatasetStore
        dataset = PreparedDataset.open("rmat12", sys.argv[1])
        features_file = str(dataset.array_path("features"))
        assert dataset.features is not None  # mapped now
        with SharedDatasetStore(dataset, PlacementPlan.model_validate_json(sys.argv[2])):
            gc.collect()
            maps = open("/proc/self/maps").read().splitlines()
            print(sum(line.endswith(features_file) for line in maps))
        """,
        str(small_rmat.directory.parent),
        _plan(small_rmat, host_fraction=1.0).model_dump_json(),
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "0"
