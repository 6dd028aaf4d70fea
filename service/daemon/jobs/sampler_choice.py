"""Which sampler a job's producers run: the spec's `sampler`, with `auto` resolved at submit.

`auto` is gpu on a CUDA job whose placement puts structure on the device (the hot lists the
GPU sampler reads from device memory) and whose daemon can run the GPU ops, else cpu; a CPU
job's `auto` is already cpu (the spec resolves it), and so is a link job's (the GPU sampler
expands node seeds only, not a link batch's pairs and negatives). The job's spec records the
result, so `job status` and the producers see cpu or gpu, never auto.
"""

from __future__ import annotations

from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.placement import PlacementPlan


def gpu_sampler_unavailable() -> str:
    """Why this daemon's producers cannot sample on a GPU ("" when they can)."""
    from graphtier.service.gpu.sampler import unavailable_reason  # CUDA is probed only when asked about

    return unavailable_reason()


def resolve_sampler(spec: JobSpec, plan: PlacementPlan) -> JobSpec:
    """`spec` with `sampler` cpu or gpu; `plan` is the dataset's placement as the job shares it."""
    if spec.sampler != "auto":
        return spec
    on_device = spec.device == "cuda" and plan.structure_device_end > 0
    gpu = spec.task == "node" and on_device and not gpu_sampler_unavailable()
    return spec.model_copy(update={"sampler": "gpu" if gpu else "cpu"})
