"""Link-prediction jobs end to end: a real daemon, producers seeding batches with edges, 2 gloo ranks."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from best_epoch_checks import check_best_epoch

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.cli.job import _result_columns, describe
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.link_model import CALIBRATION_WEIGHTS

LINK_METRICS = ("val_auc", "val_mrr", "val_hits@50", "test_auc", "test_mrr", "test_hits@50")


@pytest.fixture(scope="module")
def featureless_link(prepared_root, shared_datasets, tmp_path_factory):
    """Cora's edges alone as a SNAP-style edge list (no features, no labels), split for link prediction."""
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
    from graphtier.service.prepared.edge_split import EdgeSplitSpec
    from graphtier.service.sources import load_source

    data = load_source(f"planetoid:{shared_datasets / 'planetoid_cora'}")
    edges = tmp_path_factory.mktemp("edges") / "cora-edges.txt"
    keep = data.src < data.dst
    pairs = zip(data.src[keep].tolist(), data.dst[keep].tolist(), strict=True)
    edges.write_text("".join(f"{u}\t{v}\n" for u, v in pairs))
    prepare_dataset(
        PrepareConfig(
            source=f"edges:{edges}",
            name="cora-edges-link",
            undirected=True,
            edge_split=EdgeSplitSpec(fractions=(0.85, 0.05, 0.10), eval_negatives=10_000),
            root=prepared_root,
        )
    )
    return PreparedDataset.open("cora-edges-link", prepared_root)


def _run(daemon, spec: JobSpec):
    with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
        job = client.submit_job(spec)
        list(client.job_events(job.job_id, follow=True))
        final = client.get_job(job.job_id)
        assert final.state == JobState.SUCCEEDED, f"{final.message}\n{open(final.log_path).read()[-3000:]}"
        shown = next(j for j in client.status().jobs if j.job_id == job.job_id)  # the status page's /v1/status
    assert shown.link_metrics == final.result.metrics and shown.best == final.result.best
    check_best_epoch(final)  # picked by val_hits@50, its figures as the log printed that epoch's
    return job, final


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_two_rank_link_job_reports_auc_mrr_and_hits(inproc_daemon, cora_link):
    spec = JobSpec(
        dataset="cora-link", task="link", fanouts=[5, 5], batch_size=512, hidden=64, epochs=2, lr=0.01,
        dropout=0.0, nproc_per_node=2, negatives=2,
    )  # fmt: skip
    job, final = _run(inproc_daemon, spec)
    assert final.spec.task == "link" and final.spec.negatives == 2
    metrics = final.result.metrics
    assert sorted(metrics) == sorted(LINK_METRICS)
    assert all(0.0 <= value <= 1.0 for value in metrics.values())
    assert metrics["test_auc"] > 0.6  # learned something beyond chance (0.5) in 8 steps
    p = final.progress
    steps = 4488 // 2 // 512 + 1  # the train edges, sharded over 2 ranks, in batches of 512
    assert p.steps_per_epoch == steps and p.global_step == 2 * steps
    status = inproc_daemon.tracker.ranks(job.job_id)
    for rank in (0, 1):  # producers sampled pairs' endpoints: seeds are endpoints, batches are edges
        producer = status[rank].producer
        assert producer.batches_total == 2 * steps and producer.sampled_nodes_total > 0
    shown = describe(final)  # `graphtier job status`
    assert "link prediction (2 uniform negative(s) per edge, dot decoder)" in shown.replace("\n    ", " ")
    assert f"test_auc {metrics['test_auc']:.4f}" in shown
    assert _result_columns(final.result) == (f"{metrics['val_auc']:.4f} auc", f"{metrics['test_auc']:.4f} auc")


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_featureless_link_job_learns_embeddings(inproc_daemon, featureless_link):
    assert featureless_link.manifest.link_split["node_inputs"] == "learned embeddings"
    spec = JobSpec(
        dataset="cora-edges-link", task="link", fanouts=[5, 5], batch_size=512, hidden=32, epochs=2, lr=0.05,
        dropout=0.0, nproc_per_node=2, negative_sampling="corrupt-tail", decoder="mlp+cn+aa",
    )  # fmt: skip
    _, final = _run(inproc_daemon, spec)
    assert any("learns a 32-wide embedding per node" in note for note in final.notes)
    assert "mlp+cn+aa decoder" in describe(final).replace("\n    ", " ")  # scored with common-neighbour features
    assert sorted(final.result.metrics) == sorted(LINK_METRICS)
    log = Path(final.log_path).read_text()
    weights = [float(w) for w in re.findall(r"mlp\+cn\+aa decoder: Adamic-Adar weighed (\S+) ", log)]
    assert len(weights) == 2 and all(w in CALIBRATION_WEIGHTS for w in weights)  # calibrated at each evaluation
    # common-neighbour features rank many edges above the best of the 10k non-edges after 2 epochs (measured 0.41)
    assert final.result.metrics["test_hits@50"] > 0.2


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_hetero_link_job_trains_rgcn_on_the_target_relation(inproc_daemon, acm_link):
    """ACM's paper-has_subject-subject by 2 ranks: heterogeneous producers seed batches with the relation's
    train edges and subject negatives, R-GCN and an MLP decoder score them."""
    spec = JobSpec(
        dataset="acm-link", task="link", model="rgcn", relation_fanouts=["5", "5"], batch_size=256, hidden=32,
        epochs=2, lr=0.01, dropout=0.2, nproc_per_node=2, negatives=2, negative_sampling="corrupt-tail",
        decoder="mlp",
    )  # fmt: skip
    job, final = _run(inproc_daemon, spec)
    assert not any("has no node features" in note for note in final.notes)  # the papers have theirs
    assert any("learned 32-wide embedding per node" in note and "subject (60)" in note for note in final.notes)
    metrics = final.result.metrics
    assert sorted(metrics) == sorted(LINK_METRICS)
    assert all(0.0 <= value <= 1.0 for value in metrics.values()), metrics
    # a model that learned nothing scores at chance: AUC 0.5, MRR about 0.05 against 100 random subjects
    # (0.02 when it scores every pair alike); measured after these 2 epochs: AUC 0.90, MRR 0.11
    assert metrics["test_auc"] > 0.8 and metrics["test_mrr"] > 0.08, metrics
    steps = math.ceil(math.ceil(acm_link.manifest.link_split["sizes"]["train"] / 2) / 256)  # 2 ranks' shares
    assert final.progress.steps_per_epoch == steps and final.progress.global_step == 2 * steps
    status = inproc_daemon.tracker.ranks(job.job_id)
    for rank in (0, 1):
        assert status[rank].producer.batches_total == 2 * steps and status[rank].producer.sampled_nodes_total > 0


def test_link_jobs_the_dataset_cannot_train_are_refused(inproc_daemon, prepared_root, tmp_path):
    from graphtier.service.prepared import PrepareConfig, prepare_dataset
    from graphtier.service.prepared.edge_split import EdgeSplitSpec

    edges = tmp_path / "ring.txt"
    edges.write_text("".join(f"{u}\t{(u + 1) % 40}\n" for u in range(40)))
    no_val = EdgeSplitSpec(fractions=(0.9, 0.0, 0.1), eval_negatives=100)
    prepare_dataset(PrepareConfig(source=f"edges:{edges}", name="ring-no-val", edge_split=no_val, root=prepared_root))
    with DaemonClient(runtime_dir=inproc_daemon.config.runtime_dir) as client:
        with pytest.raises(DaemonRequestError, match=r"no edge split .*--edge-split 0\.85,0\.05,0\.10"):
            client.submit_job(JobSpec(dataset="rmat12", task="link"))
        with pytest.raises(DaemonRequestError, match=r"mlp\+cn\+aa decoder .* 'ring-no-val' has no validation edges"):
            client.submit_job(JobSpec(dataset="ring-no-val", task="link", decoder="mlp+cn+aa"))


def test_hetero_link_job_refuses_the_common_neighbour_decoder():
    with pytest.raises(ValueError, match=r"model rgcn: decoder 'mlp\+cn' is not supported .* use dot or mlp"):
        JobSpec(dataset="x", task="link", model="rgcn", decoder="mlp+cn")


def test_link_only_fields_are_refused_on_a_node_job():
    with pytest.raises(ValueError, match="applies to task 'link' only"):
        JobSpec(dataset="x", negatives=3)
