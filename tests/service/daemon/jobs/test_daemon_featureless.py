"""Featureless node types through the daemon: ACM's authors and subjects from their prepared neighbour
means, trained by 2 ranks with their own row-wise optimizer, exported, loaded and inferred from; the
means equal a numpy recomputation from the source's raw files; options refused by name."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.artifact import artifact_dir
from graphtier.contract.jobs.directory import job_directory
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.exported_model import load_model
from graphtier.launcher.runtime.models.rgcn import RGCN


def _raw(path: Path, dtype: type) -> np.ndarray:
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",", dtype=dtype, ndmin=2)


def test_neighbour_means_equal_a_numpy_recomputation_from_the_raw_files(prepared_acm, shared_datasets):
    raw = shared_datasets / "ogb_hetero_acm" / "raw"
    papers = _raw(raw / "node-feat" / "paper" / "node-feat.csv.gz", np.float64)
    schema = prepared_acm.manifest.hetero
    assert schema is not None and not schema.type_named("paper").neighbour_means
    order = prepared_acm.new_to_old.numpy()
    for node_type, relation in (("author", "written_by"), ("subject", "has_subject")):
        edges = _raw(raw / "relations" / f"paper___{relation}___{node_type}" / "edge.csv.gz", np.int64)
        info = schema.type_named(node_type)
        expected = np.zeros((info.count, papers.shape[1]))
        np.add.at(expected, edges[:, 1], papers[edges[:, 0]])
        expected /= np.maximum(np.bincount(edges[:, 1], minlength=info.count), 1)[:, None]
        (mean,) = info.neighbour_means
        assert (mean.relation, mean.source_type, mean.feature_dim) == (f"paper-{relation}-{node_type}", "paper", 1902)
        stored = prepared_acm.array(mean.array).numpy()
        local_order = order[info.offset : info.offset + info.count] - info.offset  # rows in the prepared order
        np.testing.assert_allclose(stored, expected[local_order], rtol=1e-5, atol=1e-7)


def _run(client: DaemonClient, spec: JobSpec):
    job = client.submit_job(spec)
    list(client.job_events(job.job_id, follow=True))
    final = client.get_job(job.job_id)
    assert final.state == JobState.SUCCEEDED, f"{final.message}\n{Path(final.log_path).read_text()[-3000:]}"
    return final


@pytest.mark.long  # trains, exports and infers: well over 3 s on 2 cores
def test_neighbour_mean_job_trains_on_two_ranks_exports_and_infers(make_inproc_daemon, prepared_acm):
    daemon = make_inproc_daemon()
    runtime = daemon.config.runtime_dir
    spec = JobSpec(
        dataset="acm", model="rgcn", relation_fanouts=["5", "5"], batch_size=16, hidden=32, epochs=3, lr=0.02,
        dropout=0.5, weight_decay=5e-4, nproc_per_node=2, checkpoint_every_steps=2,
        featureless_init="neighbour-mean", embedding_lr=0.01, embedding_weight_decay=0.1, embedding_dropout=0.2,
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        with pytest.raises(DaemonRequestError, match=r"embedding_dropout"):
            client.submit_job(spec.model_copy(update={"embedding_dropout": 1.5}))
        trained = _run(client, spec)
        assert any("own row-wise Adam" in note for note in trained.notes), trained.notes
        assert any("author, subject start from their neighbours' mean" in note for note in trained.notes)
        assert trained.result.best.test_accuracy > 0.6, trained.result  # 3 classes: chance is about 0.33
        inferred = _run(client, JobSpec(dataset="acm", from_job=trained.job_id, batch_size=1024, nproc_per_node=2))

    model = load_model(artifact_dir(job_directory(runtime, trained.job_id)))
    assert isinstance(model, RGCN)
    means = model.input.neighbour["author"].relations[0].rows
    expected = prepared_acm.array(prepared_acm.manifest.hetero.type_named("author").neighbour_means[0].array)
    assert torch.equal(means, expected)  # exported with the weights: a loaded model needs no dataset
    assert model.input.embed["author"].weight.abs().sum() > 0  # the residual embeddings learned
    assert not hasattr(model.input.embed["author"], "exp_avg")  # the optimizer state stays out of the export
    test = prepared_acm.manifest.split_sizes["test"]
    assert inferred.result.test_accuracy == pytest.approx(trained.result.best.test_accuracy, abs=2 / test)
