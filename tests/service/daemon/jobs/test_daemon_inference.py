"""Inference jobs end to end: a real daemon, a trained job's model applied layer by layer by 2 gloo
ranks over every node (or an id file's), read through the tiers, written in the source's ids."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.inference import HOMOGENEOUS_GROUP
from graphtier.contract.jobs.directory import job_directory, layer_rows_dir, predictions_dir
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.cli.job import describe
from graphtier.launcher.client import DaemonClient
from graphtier.launcher.runtime.inference_output import read_manifest, read_output
from graphtier.launcher.runtime.last_input import last_input
from graphtier.launcher.runtime.trained_model import load_trained_model
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.sampling import Block

pytestmark = pytest.mark.long  # each test trains a job, then infers every node layer by layer


@pytest.fixture(scope="module")
def cora_nodes(shared_datasets, prepared_root) -> PreparedDataset:
    """Cora (its Planetoid split), undirected, for node classification."""
    if not (prepared_root / "cora-nodes").exists():
        source = f"planetoid:{shared_datasets / 'planetoid_cora'}"
        prepare_dataset(PrepareConfig(source=source, name="cora-nodes", undirected=True, root=prepared_root))
    return PreparedDataset.open("cora-nodes", prepared_root)


@pytest.fixture
def daemon(make_inproc_daemon):
    """A daemon serving the suite's prepared datasets; a succeeded job leaves its exported model."""
    return make_inproc_daemon()


def run(client: DaemonClient, spec: JobSpec, state: JobState = JobState.SUCCEEDED):
    job = client.submit_job(spec)
    list(client.job_events(job.job_id, follow=True))
    final = client.get_job(job.job_id)
    assert final.state == state, f"{final.message}\n{Path(final.log_path).read_text()[-3000:]}"
    return final


def full_graph_forward(module, prepared: PreparedDataset, layers: int) -> torch.Tensor:
    """The model over the whole graph at once (every layer's block the whole CSC): the reference."""
    graph = prepared.graph
    n = graph.num_nodes
    block = Block(indptr=graph.colptr, indices=graph.row, num_src=n, num_dst=n)
    with torch.no_grad():
        return module([block] * layers, prepared.features.float())


def test_inference_writes_every_nodes_embeddings_and_predictions_in_the_source_ids(daemon, cora_nodes):
    runtime = daemon.config.runtime_dir
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(
            client,
            JobSpec(
                dataset="cora-nodes",
                fanouts=[10, 5],
                eval_fanouts=[-1, -1],
                batch_size=64,
                hidden=32,
                epochs=2,
                nproc_per_node=2,
            ),  # fmt: skip
        )
        final = run(client, JobSpec(dataset="cora-nodes", from_job=trained.job_id, batch_size=500, nproc_per_node=2))
    # the model's fields are the trained job's, whatever the inference job was submitted with
    assert (final.spec.model, final.spec.hidden, final.spec.fanouts) == ("sage", 32, [10, 5])
    assert final.spec.trains == f"sage of job {trained.job_id} (inference)"
    n = cora_nodes.manifest.num_nodes
    chunks = 2 * (-(-(n // 2) // 500))  # 2 layers of each rank's half of the nodes, 500 a chunk
    assert final.progress.total_steps == chunks and final.progress.global_step == chunks
    # layer 0 read every chunk's sources through the tiers, counted as a producer's gathers are
    assert final.progress.traffic.total_rows >= n
    out = predictions_dir(job_directory(runtime, final.job_id))
    manifest = read_manifest(out)
    assert manifest.trained.job_id == trained.job_id and manifest.rows == "every node"
    arrays = read_output(out)
    assert arrays["embeddings"].shape == (n, 32) and arrays["logits"].shape == (n, 7)
    assert np.array_equal(arrays["ids"], np.arange(n))  # row i is the source's node i
    assert len(manifest.groups[HOMOGENEOUS_GROUP].arrays["embeddings"].shards) == 2  # one shard per rank

    model = load_trained_model(job_directory(runtime, trained.job_id), torch.device("cpu"))
    reference = full_graph_forward(model.module, cora_nodes, 2)  # graphtier's ids: hotness order
    order = cora_nodes.old_to_new
    assert torch.allclose(torch.from_numpy(arrays["logits"]), reference[order], atol=1e-4)
    assert np.array_equal(arrays["predictions"], reference[order].argmax(dim=1).numpy())
    labels = cora_nodes.labels
    test = cora_nodes.split("test")
    accuracy = float((reference[test].argmax(dim=1) == labels[test]).double().mean())
    assert final.result.test_accuracy == pytest.approx(accuracy)  # the job's result: its own predictions'
    # the best epoch's weights, evaluated over every neighbour by training too: the same test accuracy
    assert manifest.trained.epoch == trained.result.best.epoch
    assert accuracy == pytest.approx(trained.result.best.test_accuracy, abs=1e-3)
    assert not layer_rows_dir(job_directory(runtime, final.job_id)).exists()  # the layer rows are gone
    shown = describe(final)  # `graphtier job status`
    assert f"step {chunks}/{chunks}, layer 2/2" in shown and f"test accuracy {accuracy:.4f}" in shown
    assert f"output {out}" in shown.replace("\n    ", " ")


def test_link_job_keeps_test_scores_that_ogbs_evaluator_recomputes(daemon, cora_link):
    """A link job's kept test scores give OGB's own Hits@50 and MRR; its inference job's embeddings give the
    job's metrics again, and `job score` scores its test pairs as the job did."""
    evaluator = pytest.importorskip("ogb.linkproppred").Evaluator
    from graphtier.launcher.runtime.link_scores import read_link_scores
    from graphtier.launcher.runtime.pair_scores import score_pairs

    runtime = daemon.config.runtime_dir
    spec = JobSpec(
        dataset="cora-link", task="link", fanouts=[5, 5], batch_size=512, hidden=32, epochs=1, lr=0.01,
        dropout=0.0, nproc_per_node=2, decoder="mlp", link_scores=True,
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(client, spec)
        manifest, arrays = read_link_scores(job_directory(runtime, trained.job_id) / "link-scores")
        best = trained.result.best
        assert manifest.epoch == best.epoch and manifest.metrics == {
            k: v for k, v in best.metrics.items() if k.startswith("test_")
        }
        positive, negative = torch.from_numpy(arrays["positive_scores"]), torch.from_numpy(arrays["negative_scores"])
        hits = evaluator("ogbl-collab").eval({"y_pred_pos": positive, "y_pred_neg": negative})["hits@50"]
        tails = torch.from_numpy(arrays["tail_scores"])
        mrr = evaluator("ogbl-citation2").eval({"y_pred_pos": positive, "y_pred_neg": tails})["mrr_list"].mean()
        assert abs(hits - best.metrics["test_hits@50"]) <= 1e-6
        assert abs(float(mrr) - best.metrics["test_mrr"]) <= 1e-6
        # the pairs in the source's ids: the test edges of the split made at prepare
        test_edges = cora_link.source_ids(cora_link.array("link_test").reshape(-1)).view(-1, 2)
        assert np.array_equal(arrays["positive_pairs"], test_edges.numpy())
        assert arrays["tails"].shape == arrays["tail_scores"].shape == (positive.numel(), 100)

        inferred = run(client, JobSpec(dataset="cora-link", from_job=trained.job_id, nproc_per_node=2))
        with pytest.raises(DaemonRequestError, match="'last-input' is not supported for a sage link model"):
            client.submit_job(JobSpec(dataset="cora-link", from_job=trained.job_id, embeddings="last-input"))
    assert (inferred.spec.task, inferred.spec.decoder) == ("link", "mlp")
    embeddings = read_output(predictions_dir(job_directory(runtime, inferred.job_id)))["embeddings"]
    assert embeddings.shape == (cora_link.manifest.num_nodes, 32)
    for name, value in trained.result.metrics.items():  # the same weights, every neighbour: the same figures
        assert inferred.result.metrics[name] == pytest.approx(value, abs=2e-3), name
    root = cora_link.directory.parent
    scored = score_pairs(runtime, root, inferred.job_id, torch.from_numpy(arrays["positive_pairs"]))
    assert torch.allclose(scored, positive, atol=1e-4)


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_last_input_embeddings_are_what_the_last_layers_weights_read(daemon, cora_nodes, model):
    """`embeddings: last-input` writes the rows of which the logits are the last layer's linear map: the
    manifest names them, the predictions and the job's figures are the model's own."""
    runtime = daemon.config.runtime_dir
    spec = JobSpec(
        dataset="cora-nodes", model=model, fanouts=[10, 5], batch_size=64, hidden=32, heads=4, epochs=2,
        nproc_per_node=2,
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(client, spec)
        hidden = run(client, JobSpec(dataset="cora-nodes", from_job=trained.job_id, nproc_per_node=2))
        final = run(
            client,
            JobSpec(dataset="cora-nodes", from_job=trained.job_id, nproc_per_node=2, embeddings="last-input"),
        )
    assert final.spec.embeddings == "last-input" and hidden.spec.embeddings == "hidden"
    out = predictions_dir(job_directory(runtime, final.job_id))
    width = 32 if model == "gcn" else 4 * 32  # GAT: each of the last layer's 4 heads over the 32 hidden columns
    manifest = read_manifest(out)
    assert (manifest.embeddings.kind, manifest.embeddings.width) == ("last-input", width)
    assert read_manifest(predictions_dir(job_directory(runtime, hidden.job_id))).embeddings.kind == "hidden"
    arrays = read_output(out)
    before = read_output(predictions_dir(job_directory(runtime, hidden.job_id)))
    assert arrays["embeddings"].shape == (cora_nodes.manifest.num_nodes, width)
    module = load_trained_model(job_directory(runtime, trained.job_id), torch.device("cpu")).module
    split = last_input(module.convs[-1], model)
    with torch.no_grad():
        logits = split.logits(torch.from_numpy(np.asarray(arrays["embeddings"])))
    assert torch.allclose(logits, torch.from_numpy(np.asarray(arrays["logits"])), atol=1e-4)
    assert np.allclose(arrays["logits"], before["logits"], atol=1e-4)  # the same model's output either way
    assert final.result.test_accuracy == pytest.approx(hidden.result.test_accuracy, abs=1e-3)


@pytest.mark.parametrize("model", ["rgcn", "rgat", "hgt"])
def test_hetero_inference_writes_each_node_types_rows(daemon, prepared_acm, model):
    runtime = daemon.config.runtime_dir
    spec = JobSpec(
        dataset="acm", model=model, relation_fanouts=["5", "5"], batch_size=64, hidden=16, epochs=2, lr=0.05,
        dropout=0.2, nproc_per_node=2,
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(client, spec)
        inferred = run(client, JobSpec(dataset="acm", from_job=trained.job_id, batch_size=1024, nproc_per_node=2))
        probe = JobSpec(
            dataset="acm", from_job=trained.job_id, batch_size=1024, nproc_per_node=2, embeddings="last-input"
        )
        if model == "rgat":
            with pytest.raises(DaemonRequestError, match="embeddings 'last-input' is not supported for model rgat"):
                client.submit_job(probe)
            probed = None
        else:
            probed = run(client, probe)
    schema = prepared_acm.manifest.hetero
    out = predictions_dir(job_directory(runtime, inferred.job_id))
    assert sorted(read_manifest(out).groups) == sorted(t.name for t in schema.node_types)
    for info in schema.node_types:
        arrays = read_output(out, info.name)
        assert arrays["embeddings"].shape == (info.count, 16)
        assert np.array_equal(arrays["ids"], np.arange(info.count))  # each type's own ids, in its order
        assert ("logits" in arrays) == (info.name == schema.target_type)
    # the best epoch's weights evaluated over every neighbour, as training evaluates a heterogeneous job
    test = prepared_acm.manifest.split_sizes["test"]
    assert inferred.result.test_accuracy == pytest.approx(trained.result.best.test_accuracy, abs=2 / test)
    if probed is None:
        return
    # last-input: R-GCN's [h_v, each relation's mean] (its last layer computed for the target type only),
    # HGT's classifier input (its hidden rows); the logits are the same model's either way
    out = predictions_dir(job_directory(runtime, probed.job_id))
    width = (len(schema.relations) + 1) * 16 if model == "rgcn" else 16
    assert read_manifest(out).embeddings.width == width
    target = read_output(out, schema.target_type)
    assert target["embeddings"].shape[1] == width
    assert np.allclose(
        target["logits"],
        read_output(predictions_dir(job_directory(runtime, inferred.job_id)), schema.target_type)["logits"],
        atol=1e-4,
    )
    for info in schema.node_types:
        assert ("embeddings" in read_output(out, info.name)) == (model == "hgt" or info.name == schema.target_type)
    assert probed.result.test_accuracy == pytest.approx(inferred.result.test_accuracy, abs=1e-3)


def wait_for(predicate, what: str, timeout_s: float = 300.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def rmat_sage(daemon, small_rmat):
    """A succeeded 3-layer GraphSAGE job on rmat12 (its id)."""
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5, 5], batch_size=256, hidden=16, epochs=1, nproc_per_node=1)
    with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
        return run(client, spec).job_id


def test_a_killed_rank_resumes_at_the_first_layer_not_completed(daemon, small_rmat, rmat_sage):
    runtime = daemon.config.runtime_dir
    spec = JobSpec(dataset="rmat12", from_job=rmat_sage, batch_size=4, nproc_per_node=2, max_restarts=1)
    with DaemonClient(runtime_dir=runtime) as client:
        job = client.submit_job(spec)
        layers = layer_rows_dir(job_directory(runtime, job.job_id))
        wait_for(lambda: (layers / "layer-0.done.json").exists(), "layer 0 to complete")
        rank1 = wait_for(lambda: next((r for r in client.get_job(job.job_id).ranks if r.rank == 1), None), "rank 1")
        os.kill(rank1.trainer_pid, signal.SIGKILL)
        list(client.job_events(job.job_id, follow=True))
        final = client.get_job(job.job_id)
    log = Path(final.log_path).read_text()
    assert final.state == JobState.SUCCEEDED, f"{final.message}\n{log[-3000:]}"
    resumed = [line for line in log.splitlines() if "completed by an earlier attempt: resuming at layer" in line]
    assert len(resumed) == 1, log[-3000:]
    assert not layers.exists()  # the layer rows are removed once the output is written
    model = load_trained_model(job_directory(runtime, rmat_sage), torch.device("cpu"))
    reference = full_graph_forward(model.module, small_rmat, 3)[small_rmat.old_to_new]
    logits = read_output(predictions_dir(job_directory(runtime, final.job_id)))["logits"]
    assert torch.allclose(torch.from_numpy(logits), reference, atol=1e-4)


def test_an_inference_job_is_cancelled_with_its_ranks(daemon, rmat_sage):
    spec = JobSpec(dataset="rmat12", from_job=rmat_sage, batch_size=1, nproc_per_node=2)
    with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
        job = client.submit_job(spec)
        running = wait_for(
            lambda: (j := client.get_job(job.job_id)).state == JobState.RUNNING and len(j.ranks) == 2 and j, "running"
        )
        assert running.progress.total_steps == 3 * 4096 // 2  # per rank: chunks of one node, half of each layer
        cancelled = client.cancel_job(job.job_id, "enough")
    assert cancelled.state == JobState.CANCELLED and cancelled.message == "enough"
    for rank in running.ranks:
        with pytest.raises(ProcessLookupError):
            os.kill(rank.trainer_pid, 0)


def test_an_id_file_computes_its_nodes_rows_in_its_order(daemon, cora_nodes, tmp_path):
    runtime = daemon.config.runtime_dir
    ids = torch.randperm(cora_nodes.manifest.num_nodes, generator=torch.Generator().manual_seed(3))[:50]
    listed = tmp_path / "ids.txt"
    listed.write_text("".join(f"{i}\n" for i in ids.tolist()))
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(client, JobSpec(dataset="cora-nodes", fanouts=[10, 5], batch_size=64, hidden=32, epochs=1))
        final = run(
            client,
            JobSpec(dataset="cora-nodes", from_job=trained.job_id, ids=str(listed), batch_size=16, nproc_per_node=2),
        )
        listed.write_text("5\n99999\n")
        failed = run(client, JobSpec(dataset="cora-nodes", from_job=trained.job_id, ids=str(listed)), JobState.FAILED)
        empty = tmp_path / "none.npy"
        np.save(empty, np.zeros(0, dtype=np.int64))  # as an empty text file: no rows to write is not a success
        nothing = run(client, JobSpec(dataset="cora-nodes", from_job=trained.job_id, ids=str(empty)), JobState.FAILED)
        jobs = len(client.list_jobs())
        for bad, said in ((listed, "ids [99999] are not nodes of dataset 'cora-nodes'"), (empty, "holds no ids")):
            refused = _graphtier(runtime, "job", "predict", trained.job_id, "--ids", bad)  # refused before it runs
            assert refused.returncode == 2 and f"ids file {bad}: {said}" in refused.stderr, refused.stderr
        assert len(client.list_jobs()) == jobs  # nothing submitted
    assert f"ids file {listed}: ids [99999] are not nodes of dataset 'cora-nodes'" in failed.message
    assert f"ids file {empty}: holds no ids" in nothing.message
    out = predictions_dir(job_directory(runtime, final.job_id))
    arrays = read_output(out)
    assert read_manifest(out).rows == str(listed) and np.array_equal(arrays["ids"], ids.numpy())
    model = load_trained_model(job_directory(runtime, trained.job_id), torch.device("cpu"))
    reference = full_graph_forward(model.module, cora_nodes, 2)[cora_nodes.old_to_new[ids]]
    assert torch.allclose(torch.from_numpy(arrays["logits"]), reference, atol=1e-4)
    # only the ids' receptive field was computed: fewer chunks than 2 layers of every node's
    assert final.progress.total_steps < 2 * (cora_nodes.manifest.num_nodes // 2 // 16)


def test_inference_refuses_what_it_cannot_apply(daemon, cora_nodes, rmat_sage, tmp_path):
    with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
        for spec, why in (
            (JobSpec(dataset="rmat12", from_job="404"), "from_job '404': no such job on this daemon"),
            (JobSpec(dataset="cora-nodes", from_job=rmat_sage), "trained on dataset 'rmat12', not 'cora-nodes'"),
            (
                JobSpec(dataset="rmat12", from_job=rmat_sage, script=str(tmp_path / "x.py")),
                "runs the built-in layer-wise inference; a script infers with its own model through job.layerwise",
            ),
            (JobSpec(dataset="rmat12", from_job=rmat_sage, ids=str(tmp_path / "none")), "ids .*none: no such file"),
        ):
            with pytest.raises(DaemonRequestError, match=why):
                client.submit_job(spec)
    with pytest.raises(ValueError, match="ids .* choose the nodes of an inference job: give from_job too"):
        JobSpec(dataset="rmat12", ids=str(tmp_path / "ids.npy"))


def test_a_script_infers_layer_by_layer_with_its_own_model(daemon, cora_nodes):
    """examples/sage_blocks.py --predict: `job.layerwise` over the script's own GraphSAGE, saved in source ids."""
    runtime = daemon.config.runtime_dir
    script = Path(__file__).resolve().parents[4] / "examples" / "sage_blocks.py"
    spec = JobSpec(
        dataset="cora-nodes", script=str(script), args=["--predict"], fanouts=[10, 5], batch_size=64, hidden=32,
        epochs=4, lr=0.01, nproc_per_node=2,
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        final = run(client, spec)
    out = predictions_dir(job_directory(runtime, final.job_id))
    manifest, arrays = read_manifest(out), read_output(out)
    n = cora_nodes.manifest.num_nodes
    assert manifest.trained is None and manifest.rows == "every node"
    assert arrays["embeddings"].shape == (n, 32) and arrays["logits"].shape == (n, 7)
    assert np.array_equal(arrays["ids"], np.arange(n))
    test = cora_nodes.split("test")  # graphtier's ids; the output's rows are the source's
    source_test = cora_nodes.source_ids(test).numpy()
    accuracy = float((arrays["logits"][source_test].argmax(axis=1) == cora_nodes.labels[test].numpy()).mean())
    logged = Path(final.log_path).read_text()
    assert f"layer-wise predictions: test accuracy {accuracy:.4f}" in logged
    # every neighbour rather than the job's sampled evaluation: about the same accuracy
    assert abs(accuracy - final.result.test_accuracy) <= 0.05, (accuracy, final.result.test_accuracy)
    assert not layer_rows_dir(job_directory(runtime, final.job_id)).exists()


def test_hetero_link_job_keeps_scores_and_its_inference_scores_pairs_alike(daemon, acm_link):
    """R-GCN on ACM's paper-has_subject-subject: the kept test pairs, in each end type's own ids, scored again
    from its inference job's per-type embeddings give the kept scores."""
    from graphtier.launcher.runtime.link_scores import read_link_scores
    from graphtier.launcher.runtime.pair_scores import score_pairs

    runtime = daemon.config.runtime_dir
    spec = JobSpec(
        dataset="acm-link", task="link", model="rgcn", relation_fanouts=["5", "5"], batch_size=256, hidden=16,
        epochs=1, lr=0.01, dropout=0.0, nproc_per_node=2, decoder="mlp", link_scores=True,
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(client, spec)
        inferred = run(client, JobSpec(dataset="acm-link", from_job=trained.job_id, nproc_per_node=2))
    _, arrays = read_link_scores(job_directory(runtime, trained.job_id) / "link-scores")
    schema = acm_link.manifest.hetero
    subjects = schema.type_named("subject").count
    assert (arrays["positive_pairs"][:, 1] < subjects).all()  # a subject's own id, not a global one
    out = predictions_dir(job_directory(runtime, inferred.job_id))
    assert sorted(read_manifest(out).groups) == sorted(t.name for t in schema.node_types)
    pairs = torch.from_numpy(arrays["positive_pairs"])
    scored = score_pairs(runtime, acm_link.directory.parent, inferred.job_id, pairs)
    assert torch.allclose(scored, torch.from_numpy(arrays["positive_scores"]), atol=1e-4)


def test_a_featureless_link_models_embeddings_start_from_its_learned_rows(daemon, prepared_root, tmp_path):
    """An edge list alone: the link job learned an input row per node; inference reads those rows at layer 0
    (nothing through the tiers), and its embeddings give the job's metrics again."""
    from graphtier.service.prepared.edge_split import EdgeSplitSpec

    generator = torch.Generator().manual_seed(0)
    edges = tmp_path / "edges.txt"
    src, dst = torch.randint(300, (1200,), generator=generator), torch.randint(300, (1200,), generator=generator)
    edges.write_text("".join(f"{u}\t{v}\n" for u, v in zip(src.tolist(), dst.tolist(), strict=True) if u != v))
    split = EdgeSplitSpec(fractions=(0.8, 0.1, 0.1), eval_negatives=2000)
    prepare_dataset(
        PrepareConfig(source=f"edges:{edges}", name="toy-edges", undirected=True, edge_split=split, root=prepared_root)
    )
    runtime = daemon.config.runtime_dir
    spec = JobSpec(
        dataset="toy-edges", task="link", fanouts=[5, 5], batch_size=256, hidden=16, epochs=1, lr=0.05,
        dropout=0.0, nproc_per_node=2, decoder="mlp",
    )  # fmt: skip
    with DaemonClient(runtime_dir=runtime) as client:
        trained = run(client, spec)
        inferred = run(client, JobSpec(dataset="toy-edges", from_job=trained.job_id, nproc_per_node=2))
    assert inferred.progress.traffic.total_rows == 0  # its inputs are the learned rows, not features
    training_only = ("covers the whole train split", "the job learns")  # true of its training job alone
    assert not [note for note in inferred.notes if any(words in note for words in training_only)], inferred.notes
    _score_out_writes_only_a_new_file(runtime, inferred.job_id, tmp_path)
    embeddings = read_output(predictions_dir(job_directory(runtime, inferred.job_id)))["embeddings"]
    assert embeddings.shape[1] == 16
    for name, value in trained.result.metrics.items():
        assert inferred.result.metrics[name] == pytest.approx(value, abs=2e-3), name


def _graphtier(runtime_dir: Path, *args: object) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "graphtier.launcher.cli", *map(str, args), "--runtime-dir", str(runtime_dir)]
    wide = {**os.environ, "COLUMNS": "500"}  # paths printed whole
    return subprocess.run(command, capture_output=True, text=True, timeout=180, check=False, env=wide)


def _score_out_writes_only_a_new_file(runtime: Path, job_id: str, tmp_path: Path) -> None:
    """`job score --out` writes a new .npy and says which; it never writes over a file or through a link, and
    an empty pairs file is refused as an empty text one is."""
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("0 1\n2 3\n")
    kept = tmp_path / "notes.txt"
    kept.write_text("mine\n")
    (tmp_path / "link.npy").symlink_to(kept)
    old = tmp_path / "old.npy"
    np.save(old, np.arange(3))
    for taken in (tmp_path / "link.npy", old):
        refused = _graphtier(runtime, "job", "score", job_id, "--pairs", pairs, "--out", taken)
        assert refused.returncode == 2 and f"--out {taken}: already exists" in refused.stderr, refused.stderr
    assert kept.read_text() == "mine\n" and np.array_equal(np.load(old), np.arange(3))
    written = _graphtier(runtime, "job", "score", job_id, "--pairs", pairs, "--out", tmp_path / "scores")
    assert written.returncode == 0 and f"scored 2 pairs into {tmp_path / 'scores.npy'}" in written.stderr
    assert np.load(tmp_path / "scores.npy").shape == (2,)
    again = _graphtier(runtime, "job", "score", job_id, "--pairs", pairs, "--out", tmp_path / "scores.npy")
    assert again.returncode == 2 and "already exists" in again.stderr
    empty = tmp_path / "pairs.npy"
    np.save(empty, np.zeros((0, 2), dtype=np.int64))
    nothing = _graphtier(runtime, "job", "score", job_id, "--pairs", empty)
    assert nothing.returncode == 2 and f"pairs file {empty}: holds no pairs" in nothing.stderr
