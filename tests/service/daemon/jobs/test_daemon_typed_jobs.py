"""Typed (heterogeneous) jobs end to end: a real daemon serving ACM, typed producers, gloo ranks.

(`examples/typed_gnn.py` submitted with `--script` runs in docs/guides/typed-graphs.md.)"""

from __future__ import annotations

import pytest

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient


def _run(client: DaemonClient, spec: JobSpec):
    job = client.submit_job(spec)
    list(client.job_events(job.job_id, follow=True))
    final = client.get_job(job.job_id)
    assert final.state == JobState.SUCCEEDED, f"{final.message}\n{open(final.log_path).read()[-3000:]}"
    return final


def test_typed_jobs_train_rgcn_and_refuse_mismatches(inproc_daemon, prepared_acm):
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        for spec, why in (
            (JobSpec(dataset="rmat12", model="rgcn"), "model rgcn trains typed graphs but dataset 'rmat12'"),
            (JobSpec(dataset="acm", model="sage"), "dataset 'acm' is typed .* model sage takes one node type"),
            (
                JobSpec(dataset="acm", model="hgt", relation_fanouts=["paper-cites-paper:5", "5"]),
                "dataset 'acm', --fanout: hop 1: unknown relation 'paper-cites-paper'; the dataset's relations are",
            ),
        ):
            with pytest.raises(DaemonRequestError, match=why):
                client.submit_job(spec)
        assert client.list_jobs() == []  # nothing was accepted

        spec = JobSpec(
            dataset="acm", model="rgcn", relation_fanouts=["5", "5"], batch_size=8, hidden=32, epochs=3, lr=0.05,
            dropout=0.5, weight_decay=5e-4, nproc_per_node=2,
        )  # fmt: skip
        final = _run(client, spec)
        assert final.spec.fanouts == [5, 5] and final.spec.relation_fanouts == ["5", "5"]
        assert any("learned 32-wide embedding per node" in note and "author (7,167)" in note for note in final.notes)
        assert final.result.test_accuracy > 0.55, final.result  # 3 classes: chance is about 0.33
