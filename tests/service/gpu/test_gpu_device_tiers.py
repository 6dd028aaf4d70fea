"""Device tiers end to end: the store places them on the GPU, another process opens the IPC
handles and gathers the same bytes as the CPU path; closing frees the device memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import torch
from gpu_marks import needs_cuda

from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.store import SharedDatasetStore

pytestmark = needs_cuda


def _plan(ds) -> PlacementPlan:
    n, row_bytes = ds.manifest.num_nodes, ds.manifest.feature_row_bytes
    budgets = TierBudgets(
        device_replicated_bytes=n * row_bytes // 10,
        device_interleaved_bytes=n * row_bytes // 5,
        num_devices=1,
        host_bytes=n * row_bytes // 2,
        structure_device_bytes=0,
    )
    return PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes)


CHILD = """
import json, sys, torch
from graphtier.service.memory.device_ipc import opened_handles
from graphtier.service.gpu.gather import CudaGather
from graphtier.service.gpu.host_registry import host_registry
from graphtier.service.store import SharedDatasetHandle, attach_dataset
ds = attach_dataset(SharedDatasetHandle.model_validate_json(sys.argv[1]))
ids = torch.tensor(json.loads(sys.argv[2]))
lease = ds.cuda_tiers(0)
again = ds.cuda_tiers(0)
out = torch.empty(len(ids), ds.handle.plan.row_bytes // 4, device="cuda")
counts = CudaGather(lease.tiers).gather(ids, out)
colptr = ds.cuda_structure(0).colptr
cpu_out = torch.empty(len(ids), out.shape[1])
cpu_counts = ds.gather(ids, cpu_out)
result = {"same": bool(torch.equal(out.cpu(), cpu_out)), "counts": counts.to_dict(),
          "cpu_counts": cpu_counts.to_dict(), "handles": opened_handles().count(),
          "registrations": len(host_registry().registrations()), "same_lease": again is lease,
          "colptr_same": bool(torch.equal(colptr.cpu(), ds.graph.colptr)),
          "colptr_on_device": colptr.device.type}
ds.detach()
result["handles_after"] = opened_handles().count()
result["registrations_after"] = len(host_registry().registrations())
print(json.dumps(result))
"""


def test_device_tiers_are_shared_with_another_process_and_freed_on_close(small_rmat):
    from graphtier.service.gpu.runtime import mem_get_info

    plan = _plan(small_rmat)
    assert 0 < plan.replicated_end < plan.interleaved_end < plan.host_end < plan.num_nodes
    free_before, _ = mem_get_info(0)
    from graphtier.service.gpu.runtime import check, cudart

    rt = cudart()
    with SharedDatasetStore(small_rmat, plan, devices=[0]) as store:
        pointers = [alloc.ptr for alloc in store.device_tiers.allocations]
        for ptr in pointers:
            assert check(rt.cudaPointerGetAttributes(ptr), "attributes").type == rt.cudaMemoryType.cudaMemoryTypeDevice
        refs = store.handle.device_tiers
        assert [r.tier for r in refs] == ["replicated", "interleaved"]
        assert refs[0].rows == plan.replicated_end and refs[1].rows == plan.interleaved_end - plan.replicated_end
        assert not store.simulated_devices
        assert mem_get_info(0)[0] < free_before
        ids = torch.randperm(plan.num_nodes, generator=torch.Generator().manual_seed(2))[:900]
        child = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(CHILD), store.handle.model_dump_json(), json.dumps(ids.tolist())],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert child.returncode == 0, child.stderr
        got = json.loads(child.stdout)
    assert got["same"] and got["colptr_same"] and got["same_lease"] and got["colptr_on_device"] == "cuda"
    cpu, gpu = got["cpu_counts"], got["counts"]
    assert gpu["simulated"] is False and cpu["simulated"] is True
    for source in ("replicated", "interleaved_local", "interleaved_peer", "host", "storage"):
        assert gpu[source] == cpu[source]
    assert gpu["replicated"]["rows"] > 0 and gpu["host"]["rows"] > 0 and gpu["storage"]["rows"] > 0
    assert got["handles"] == 2 and got["registrations"] == 3  # host tier, colptr, row
    assert got["handles_after"] == 0 and got["registrations_after"] == 0
    for ptr in pointers:  # the tiers' allocations are gone
        err, attributes = rt.cudaPointerGetAttributes(ptr)
        assert err != rt.cudaError_t.cudaSuccess or attributes.type != rt.cudaMemoryType.cudaMemoryTypeDevice


STRUCTURE_CHILD = """
import json, sys, torch
from graphtier.service.gpu.sampler import CudaNeighborSampler, dataset_structure
from graphtier.service.sampling import NeighborSampler
from graphtier.service.store import SharedDatasetHandle, attach_dataset
ds = attach_dataset(SharedDatasetHandle.model_validate_json(sys.argv[1]))
structure = dataset_structure(ds, 0)
seeds = torch.arange(0, ds.graph.num_nodes, 7)[:512]
got = CudaNeighborSampler(structure, [10, 5]).sample(seeds, seed=3)
want = NeighborSampler(ds.graph, [10, 5], backend="torch").sample(seeds, seed=3)
end = structure.device_end
result = {"device_end": end, "device_type": structure.device_colptr.device.type,
          "prefix_same": bool(torch.equal(structure.device_colptr.cpu(), ds.graph.colptr[: end + 1])),
          "same": all(torch.equal(getattr(got, k).cpu(), getattr(want, k)) for k in ("node_ids", "indptr", "indices"))}
ds.detach()
print(json.dumps(result))
"""


def test_the_daemons_device_structure_tier_is_one_copy_the_sampler_of_another_process_reads(small_rmat, prepared_root):
    """The registry places the hottest nodes' CSC lists on the GPU (DeviceStructureSet), the layout
    carries their IPC handles with the feature tiers', and a producer process samples over that
    very copy plus the host rest, bit-identical to the CPU sampler; unloading frees it."""
    from graphtier.contract.datasets import BudgetSpec
    from graphtier.service.daemon.datasets.gpu_placement import GpuPlacement
    from graphtier.service.daemon.datasets.registry import DatasetRegistry

    registry = DatasetRegistry(prepared_root, gpus=GpuPlacement())
    try:
        layout = registry.load("rmat12", BudgetSpec(num_devices=1, structure_device="25%")).layout
        plan = layout.handle.plan
        assert plan.structure_device_end > 0
        tiers = {t.tier: t for t in layout.tier_sizes}
        assert tiers["structure_device"].bytes == plan.structure_device_bytes
        assert tiers["structure_host"].rows == plan.num_nodes - plan.structure_device_end
        refs = [r for r in layout.handle.device_tiers if r.tier.startswith("structure_")]
        assert [r.tier for r in refs] == ["structure_colptr", "structure_row"]
        assert refs[0].rows == plan.structure_device_end + 1 and refs[1].rows == plan.structure_device_edges
        child = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(STRUCTURE_CHILD), layout.handle.model_dump_json()],
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert child.returncode == 0, child.stderr
        got = json.loads(child.stdout)
        expected = {"device_end": plan.structure_device_end, "device_type": "cuda", "prefix_same": True}
        assert got == {**expected, "same": True}
        allocations = registry.get("rmat12").structure_tier.allocations
        assert len(allocations) == 2
    finally:
        registry.close()
    assert all(a.ptr == 0 for a in allocations), "unloading frees the device structure tier"
