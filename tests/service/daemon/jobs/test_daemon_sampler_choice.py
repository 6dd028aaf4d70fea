"""A job's `auto` sampler is resolved at submit from the job's device, the placement's structure
on the device and whether this daemon can run the GPU ops; explicit choices are kept."""

from __future__ import annotations

import pytest
import torch

from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.daemon.jobs import sampler_choice
from graphtier.service.daemon.jobs.sampler_choice import gpu_sampler_unavailable, resolve_sampler
from graphtier.service.placement import PlacementPlan


def _plan(structure_device_end: int) -> PlacementPlan:
    return PlacementPlan(
        num_nodes=100,
        row_bytes=16,
        num_devices=1,
        replicated_end=0,
        interleaved_end=0,
        host_end=100,
        structure_device_end=structure_device_end,
        structure_device_edges=3 * structure_device_end,
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is visible (the GPU sampler may run)")
def test_without_cuda_the_gpu_sampler_is_unavailable_and_auto_is_cpu():
    assert "torch sees no CUDA device" in gpu_sampler_unavailable()
    spec = JobSpec(dataset="d", device="cuda")
    assert spec.sampler == "auto"
    assert resolve_sampler(spec, _plan(10)).sampler == "cpu"


@pytest.mark.parametrize(
    ("device", "sampler", "structure_end", "ops", "resolved", "task"),
    [
        ("cuda", "auto", 10, True, "gpu", "node"),
        ("cuda", "auto", 10, True, "cpu", "link"),  # the GPU sampler expands node seeds only
        ("cuda", "auto", 0, True, "cpu", "node"),  # no structure placed on the device
        ("cuda", "auto", 10, False, "cpu", "node"),  # the daemon cannot run the GPU ops
        ("cuda", "gpu", 0, True, "gpu", "node"),
        ("cuda", "cpu", 10, True, "cpu", "node"),
        ("cpu", "auto", 10, True, "cpu", "node"),
    ],
)
def test_auto_resolves_from_device_structure_and_ops(monkeypatch, device, sampler, structure_end, ops, resolved, task):
    """The decision alone: whether the ops load is set here (the CUDA probe itself is tested above)."""
    monkeypatch.setattr(sampler_choice, "gpu_sampler_unavailable", lambda: "" if ops else "no GPU ops")
    spec = JobSpec(dataset="d", device=device, sampler=sampler, task=task)
    got = resolve_sampler(spec, _plan(structure_end))
    assert got.sampler == resolved
    assert got.model_copy(update={"sampler": spec.sampler}) == spec  # nothing else changed
