"""The daemon's notes count a job's steps as its producers do (the epoch plan), and a job whose train
split cannot give every rank a seed is refused at submit."""

from __future__ import annotations

import pytest

from graphtier.contract.errors import InvalidRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.daemon.jobs.notes import epoch_plan, spec_notes
from graphtier.service.pipeline.epoch_plan import EpochPlan
from graphtier.service.store import SharedDatasetStore


@pytest.fixture(scope="module")
def handle(small_rmat, tiered_plan):
    with SharedDatasetStore(small_rmat, tiered_plan(replicated=20, interleaved=10, num_devices=2)) as store:
        yield store.handle


def _one_step_notes(spec: JobSpec, handle) -> list[str]:
    return [note for note in spec_notes(spec, handle) if "1 step per epoch" in note]


def test_the_one_step_note_counts_the_producers_steps(small_rmat, handle):
    train = small_rmat.split("train").numel()
    assert train % 3  # 3 ranks: the producers drop train mod 3 ids, so a shard of train // 3 is 1 step
    shard = train // 3
    for batch_size in (shard - 1, shard, shard + 1, 4096):
        spec = JobSpec(dataset="rmat12", batch_size=batch_size, nproc_per_node=3, epochs=3)
        steps = EpochPlan(train, batch_size, spec.seed, 0, 3).steps_per_epoch
        assert epoch_plan(spec, handle).steps_per_epoch == steps == (1 if batch_size >= shard else 2)
        notes = _one_step_notes(spec, handle)
        assert len(notes) == (steps == 1), (batch_size, notes)
    (note,) = _one_step_notes(JobSpec(dataset="rmat12", batch_size=shard, nproc_per_node=3, epochs=3), handle)
    suggest = 1 << ((shard // 2).bit_length() - 1)
    assert f"({train:,} ids): 1 step per epoch, 3 in all; on a small graph try --batch-size {suggest}" in note


def test_more_ranks_than_train_ids_are_refused_naming_both(small_rmat, handle):
    train = small_rmat.split("train").numel()
    spec = JobSpec(dataset="rmat12", nproc_per_node=64, nnodes=16)  # 1024 ranks
    with pytest.raises(InvalidRequestError, match=rf"'rmat12': {train} train ids cannot be shared by 1024 ranks"):
        epoch_plan(spec, handle)
