"""Heterogeneous (heterogeneous) jobs end to end: a real daemon serving ACM, heterogeneous producers, gloo ranks.

(`examples/hetero_gnn.py` submitted with `--script` runs in docs/guides/hetero-graphs.md.)"""

from __future__ import annotations

import pytest
import torch
from best_epoch_checks import check_best_epoch

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.artifact import artifact_dir
from graphtier.contract.jobs.directory import job_directory
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.launcher.runtime.exported_model import load_model
from graphtier.launcher.runtime.metapath_inputs import metapath_features_path


def _run(client: DataPlaneClient, spec: JobSpec):
    job = client.submit_job(spec)
    list(client.job_events(job.job_id, follow=True))
    final = client.get_job(job.job_id)
    assert final.state == JobState.SUCCEEDED, f"{final.message}\n{open(final.log_path).read()[-3000:]}"
    return final


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_hetero_jobs_train_rgcn_and_refuse_mismatches(inproc_daemon, prepared_acm):
    with DataPlaneClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        for spec, why in (
            (JobSpec(dataset="rmat12", model="rgcn"), "model rgcn trains heterogeneous graphs but dataset 'rmat12'"),
            (JobSpec(dataset="acm", model="sage"), "dataset 'acm' is heterogeneous .* model sage takes one node type"),
            (
                JobSpec(dataset="acm", model="hgt", relation_fanouts=["paper-cites-paper:5", "5"]),
                "dataset 'acm', --fanout: hop 1: unknown relation 'paper-cites-paper'; the dataset's relations are",
            ),
        ):
            with pytest.raises(DaemonRequestError, match=why):
                client.submit_job(spec)
        assert client.list_jobs() == []  # nothing was accepted

        # one byte budget over every type: 10% of the feature bytes (ACM's are all papers') replicated,
        # and the rest left in their file: no host budget
        loaded = client.load_dataset("acm", BudgetSpec(num_devices=1, device_replicated="10%", host="0")).layout
        schema = loaded.handle.hetero
        assert schema is not None and loaded.handle.edge_type is not None
        assert sorted(loaded.handle.hetero_features) == ["paper"]  # authors and subjects: learned embeddings
        paper = loaded.handle.hetero_features["paper"]
        assert paper.plan.replicated_end == schema.type_named("paper").count // 10  # the hottest tenth of the rows
        assert paper.storage is not None and paper.storage.rows == paper.plan.num_nodes - paper.plan.host_end > 0
        sizes = {t.tier: t for t in loaded.tier_sizes}  # what `dataset load` and the status page show
        assert sizes["device_replicated"].rows == paper.plan.replicated_end
        assert sum(sizes[tier].bytes for tier in ("host", "device_replicated", "storage")) == loaded.feature_bytes

        spec = JobSpec(
            dataset="acm", model="rgcn", relation_fanouts=["5", "5"], batch_size=8, hidden=32, epochs=3, lr=0.05,
            embedding_lr=0.05, dropout=0.5, weight_decay=5e-4, nproc_per_node=2, storage_reads="page-cache",
            window=2,
        )  # fmt: skip  # 12 steps: the row-wise optimizer moves only the rows a batch touches, so at full rate
        final = _run(client, spec)
        assert final.spec.fanouts == [5, 5] and final.spec.relation_fanouts == ["5", "5"]
        assert any("learned 32-wide embedding per node" in note and "author (7,167)" in note for note in final.notes)
        # 3 classes: chance is about 0.33; at its best validation epoch (a few steps of lr 0.05 swing the last)
        assert final.result.best.test_accuracy > 0.55, final.result
        check_best_epoch(final)  # R-GCN's figures at its best validation epoch, as the log printed them
        traffic = final.progress.traffic  # the hottest tenth of the papers serve far more than a tenth of the reads
        assert traffic.simulated and traffic.total_rows > 0 and traffic.hit_ratio > 0.2, traffic
        # the papers' storage rows: read by the type's reader as batches enter its look-ahead window,
        # each row once for every batch in the window that needs it
        storage = final.progress.storage
        assert storage.mode == "page-cache" and storage.window == 2, storage
        assert storage.read_rows + storage.window_rows == traffic.storage.rows, (storage, traffic.storage)
        assert storage.read_rows > 0 and storage.window_rows > 0 and storage.requests > 0, storage
        assert storage.read_bytes >= storage.read_rows * paper.plan.row_bytes, storage


@pytest.mark.long  # 7 s or more on 2 cores: CI's second step
def test_rgat_job_trains_on_two_ranks(inproc_daemon, prepared_acm):
    """R-GAT on the typed sampler's batches by 2 DDP ranks, ACM's authors and subjects as learned embeddings."""
    with DataPlaneClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        spec = JobSpec(
            dataset="acm", model="rgat", relation_fanouts=["5", "5"], batch_size=8, hidden=64, heads=4, epochs=6,
            lr=0.01, dropout=0.2, weight_decay=5e-4, nproc_per_node=2,
        )  # fmt: skip
        final = _run(client, spec)
    assert final.spec.model == "rgat" and final.result is not None
    assert any("learned 64-wide embedding per node" in note for note in final.notes)
    # 3 classes: chance is about 0.33
    assert final.result.best.test_accuracy > 0.7, final.result
    check_best_epoch(final)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_preagg_job_trains_exports_and_refuses_what_it_cannot_do(inproc_daemon, prepared_acm, small_rmat):
    """The pre-aggregated model on 2 DDP ranks: metapath features computed once into the job's directory, an MLP
    over them; its exported model gives the job's test accuracy from those features; link, a homogeneous dataset
    and layer-wise inference are refused naming the model."""
    with pytest.raises(ValueError, match="model preagg: task 'link' is not supported"):
        JobSpec(dataset="acm", model="preagg", task="link")
    runtime = inproc_daemon.config.runtime_dir
    with DataPlaneClient(runtime_dir=runtime) as client:
        with pytest.raises(DaemonRequestError, match="model preagg trains heterogeneous graphs but dataset 'rmat12'"):
            client.submit_job(JobSpec(dataset="rmat12", model="preagg"))
        spec = JobSpec(
            dataset="acm", model="preagg", fanouts=[1, 1], batch_size=16, hidden=64, epochs=8, lr=0.005,
            dropout=0.5, weight_decay=5e-4, nproc_per_node=2,
        )  # fmt: skip
        final = _run(client, spec)
        with pytest.raises(DaemonRequestError, match=f"from_job '{final.job_id}' trained model preagg, an MLP over"):
            client.submit_job(JobSpec(dataset="acm", from_job=final.job_id))
    assert any("model preagg: an MLP over the paper nodes' metapath features of 2 hop(s)" in n for n in final.notes)
    assert not any("learned" in note for note in final.notes)  # no embeddings: featureless types carry no rows
    # 3 classes: chance is about 0.33
    assert final.result.best.test_accuracy > 0.7, final.result
    check_best_epoch(final)
    job_dir = job_directory(runtime, final.job_id)
    cached = torch.load(metapath_features_path(job_dir, 2), weights_only=True)
    schema = prepared_acm.manifest.hetero
    paper = schema.type_named("paper")
    assert [block["name"] for block in cached["blocks"]] == [
        "paper",
        "paper <rev_has_subject- subject <has_subject- paper",
        "paper <rev_written_by- author <written_by- paper",
    ]
    assert cached["matrix"].shape == (paper.count, 3 * paper.feature_dim)
    model = load_model(artifact_dir(job_dir))  # the best validation epoch's weights
    test = prepared_acm.split("test")
    with torch.no_grad():
        predicted = model(cached["matrix"][test - paper.offset]).argmax(dim=1)
    accuracy = float((predicted == prepared_acm.labels[test]).float().mean())
    assert accuracy == pytest.approx(final.result.best.test_accuracy, abs=1e-6)
