"""Advice about a job spec, noticed at submit and shown with the job (`Job.notes` in jobs.proto).

The job runs as submitted; the notes say why its figures may surprise: a batch that covers the
whole train split trains one step per epoch (the README's first Cora job trained 3 steps and
looked broken at 51%), and a dataset placed without device budgets serves every row from the
host tier, so the device hit ratio is 0 by construction rather than by a fault; and a dataset
whose labels prepare remapped to dense classes is trained and scored over those classes.
"""

from __future__ import annotations

from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.store import SharedDatasetHandle


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def spec_notes(spec: JobSpec, handle: SharedDatasetHandle) -> list[str]:
    """The notes for `spec` on the dataset `handle` describes (as placed for this job)."""
    notes = []
    train = handle.splits.get("train")
    num_train = train.shape[0] if train is not None and train.shape else 0
    if num_train:
        per_rank = _ceil_div(num_train, spec.world_size)
        if _ceil_div(per_rank, spec.batch_size) == 1:
            suggest = 1 << (max(per_rank // 2, 1).bit_length() - 1)  # a power of two giving 2+ steps
            notes.append(
                f"batch {spec.batch_size} x {spec.world_size} rank(s) covers the whole train split "
                f"({num_train:,} ids): 1 step per epoch, {spec.epochs} in all; on a small graph try "
                f"--batch-size {suggest} and more --epochs"
            )
    if handle.class_labels is not None:
        k = len(handle.class_labels)
        notes.append(
            f"dataset {handle.dataset!r} had labels that were not classes 0..{k - 1}; prepare remapped them, "
            f"so the job trains and reports accuracy over {k} classes 0..{k - 1}; class i is source label "
            f"class_labels[i] in the manifest (graphtier dataset inspect {handle.dataset} --json)"
        )
    plan = handle.plan
    if plan.interleaved_end == 0:
        notes.append(
            "no device budget: every feature row is on the host tier, so the device hit ratio is 0 and all bytes "
            "count as PCIe; give --num-devices with --device-replicated or --device-interleaved"
        )
    return notes
