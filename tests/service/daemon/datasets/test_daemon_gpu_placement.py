"""Where the daemon puts device tiers: on GPUs where it can, else accounted with the reason in the layout."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonConfigError
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.datasets.gpu_placement import GpuPlacement
from graphtier.service.gpu.runtime import device_count
from graphtier.service.placement import PlacementPlan

BUDGETS = BudgetSpec(num_devices=1, device_replicated="5%", device_interleaved="10%")
NO_GPU = device_count()[0] == 0


def _plan(num_devices: int = 1, interleaved: int = 100) -> PlacementPlan:
    return PlacementPlan(
        num_nodes=1000,
        row_bytes=64,
        num_devices=num_devices,
        replicated_end=50,
        interleaved_end=50 + interleaved,
        host_end=1000,
    )


def test_gpu_tiers_off_keeps_the_device_tiers_accounted_and_says_why():
    decision = GpuPlacement(mode="off").decide(_plan(), "d")
    assert decision.devices == () and decision.plan == _plan()
    assert decision.notes == ("device tiers accounted: the daemon runs with gpu_tiers: off",)


def test_a_plan_without_device_rows_needs_no_gpu():
    plan = PlacementPlan(num_nodes=10, row_bytes=4, num_devices=0, replicated_end=0, interleaved_end=0, host_end=10)
    assert GpuPlacement().decide(plan, "d").notes == ()


@pytest.mark.skipif(not NO_GPU, reason="this machine has a CUDA device")
def test_without_a_gpu_auto_accounts_the_tiers_naming_the_cause():
    decision = GpuPlacement(mode="auto").decide(_plan(), "d")
    assert decision.devices == ()
    (note,) = decision.notes
    assert note.startswith("device tiers accounted, not placed: ") and len(note) > 40


@pytest.mark.skipif(NO_GPU, reason="needs a CUDA device")
def test_with_a_gpu_a_plan_wider_than_the_machine_is_refused():
    from graphtier.contract.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match="span 64 devices"):
        GpuPlacement().decide(_plan(num_devices=64, interleaved=64), "d")


def test_device_budget_settings_are_checked_up_front(monkeypatch):
    with pytest.raises(DaemonConfigError, match=r"device_budget: .*'12 parsecs'"):
        DaemonConfig.build(device_budget="12 parsecs")
    with pytest.raises(DaemonConfigError, match="device_reserve"):
        DaemonConfig.build(device_reserve="120%")
    with pytest.raises(DaemonConfigError, match="device_memory: Input should be 'ipc' or 'vmm'"):
        DaemonConfig.build(device_memory="shared")
    assert DaemonConfig.build().device_memory == "ipc"
    assert DaemonConfig.build(device_memory="vmm").device_memory == "vmm"
    monkeypatch.setenv("GRAPHTIER_GPU_TIERS", "sometimes")
    with pytest.raises(DaemonConfigError, match="gpu_tiers: Input should be 'auto' or 'off'"):
        DaemonConfig.build()
    assert DaemonConfig.build(gpu_tiers="auto", device_budget="24GiB").device_budget == "24GiB"


def test_the_layout_carries_the_placement_and_its_notes_over_grpc(make_inproc_daemon):
    daemon = make_inproc_daemon(gpu_tiers="auto")
    with DataPlaneClient(runtime_dir=daemon.config.runtime_dir) as client:
        layout = client.load_dataset("rmat12", BUDGETS).layout
        assert layout == daemon.datasets.layout("rmat12")
    handle = layout.handle
    if NO_GPU:
        assert layout.simulated_devices and handle.device_tiers == ()
        assert handle.placement_notes and "not placed" in handle.placement_notes[0]
    else:
        assert not layout.simulated_devices
        assert [ref.tier for ref in handle.device_tiers] == ["replicated", "interleaved"]
        assert all(len(ref.memory.ipc_handle or "") == 128 and ref.memory.owner_pid > 0 for ref in handle.device_tiers)
        assert torch.cuda.is_available()


def test_the_structures_bytes_per_tier_reach_the_layout_and_the_status_page(make_inproc_daemon):
    """A structure budget: the layout (over gRPC) and /v1/status give the structure's bytes on the
    device and in host memory; without a GPU the device structure tier is accounted, not placed."""
    import json
    import urllib.request

    daemon = make_inproc_daemon(gpu_tiers="auto")
    budgets = BudgetSpec(num_devices=1, structure_device="10%")
    with DataPlaneClient(runtime_dir=daemon.config.runtime_dir) as client:
        layout = client.load_dataset("rmat12", budgets).layout
    plan, sizes = layout.handle.plan, {t.tier: t for t in layout.tier_sizes}
    assert 0 < plan.structure_device_end < plan.num_nodes
    assert sizes["structure_device"].bytes == plan.structure_device_bytes > 0
    assert sizes["structure_host"].rows == plan.num_nodes - plan.structure_device_end
    assert sizes["structure_host"].bytes == layout.structure_bytes  # the whole CSC stays in host memory
    structure_refs = [ref.tier for ref in layout.handle.device_tiers if ref.tier.startswith("structure_")]
    assert structure_refs == ([] if NO_GPU else ["structure_colptr", "structure_row"])
    status_url = f"{daemon.endpoints.http_url}/v1/status"
    with urllib.request.urlopen(status_url, timeout=10) as response:
        (dataset,) = json.load(response)["datasets"]
    tiers = {t["tier"]: t["bytes"] for t in dataset["tiers"]}
    assert tiers["structure_device"] == plan.structure_device_bytes
    assert tiers["structure_host"] == layout.structure_bytes
