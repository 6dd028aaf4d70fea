"""Link prediction on a heterogeneous graph's target relation: the split made at prepare (val and test edges
out of message passing both ways, negatives of the right types), the producers' sampler keeping the
relation's types, and the heterogeneous link model (HGT here; R-GCN by 2 torchrun ranks of a built-in job in
tests/service/daemon/jobs/test_daemon_link_jobs.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from graphtier.contract.errors import DatasetSourceError, PreparedDatasetError, SamplingError
from graphtier.launcher.runtime.hetero_link import HeteroLinkBatches, HeteroLinkModel, evaluate_hetero_links, link_loss
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.edge_split import EdgeSplitSpec, link_array
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler
from graphtier.service.sampling.link import LinkSampler, pair_end_types

TARGET = "paper-has_subject-subject"  # tests/conftest.py's acm_link
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def _edge_keys(dataset: PreparedDataset, relation: int) -> torch.Tensor:
    """src * N + dst of one relation's edges in the prepared graph."""
    graph = dataset.graph
    keep = dataset.array("edge_type") == relation
    return graph.row[keep] * graph.num_nodes + graph.dst_of_edges()[keep]


def test_split_leaves_val_and_test_out_of_message_passing_both_ways(acm_link):
    schema, split = acm_link.manifest.hetero, acm_link.manifest.link_split
    assert split["target_relation"] == TARGET and split["pairs"] == "directed"
    keys = [r.key for r in schema.relations]
    forward, reverse = keys.index(TARGET), keys.index("subject-rev_has_subject-paper")
    sizes = split["sizes"]
    assert sum(sizes.values()) == 4019 and sizes["test"] == 401
    n = schema.num_nodes
    pairs = {s: acm_link.array(link_array(s)) for s in ("train", "val", "test")}
    assert torch.equal(
        _edge_keys(acm_link, forward).sort().values, (pairs["train"] @ torch.tensor([n, 1])).sort().values
    )
    backward = _edge_keys(acm_link, reverse)
    assert backward.numel() == sizes["train"]
    for held in ("val", "test"):
        assert not torch.isin(pairs[held] @ torch.tensor([n, 1]), _edge_keys(acm_link, forward)).any()
        assert not torch.isin(pairs[held] @ torch.tensor([1, n]), backward).any()  # nor their reverses
    assert schema.relations[keys.index("paper-written_by-author")].num_edges == 13407  # other relations kept
    paper, subject = schema.type_named("paper"), schema.type_named("subject")
    for held in ("val", "test"):
        negatives = acm_link.array(link_array(held, negative=True))
        assert negatives.shape == (5000, 2)
        assert bool(((negatives[:, 0] >= paper.offset) & (negatives[:, 0] < paper.offset + paper.count)).all())
        assert bool(((negatives[:, 1] >= subject.offset) & (negatives[:, 1] < subject.offset + subject.count)).all())
        every = torch.cat([p @ torch.tensor([n, 1]) for p in pairs.values()])
        assert not torch.isin(negatives @ torch.tensor([n, 1]), every).any()


def test_batches_pair_train_edges_with_corrupted_tails(acm_link):
    loader = HeteroLinkBatches(acm_link, ["5", "5"], 256, negatives=2)
    first = next(loader.pairs_epoch(0))
    n = acm_link.manifest.hetero.num_nodes
    global_pairs = first.batch.subgraph.node_ids[first.pairs]  # seed positions back to global ids
    train = acm_link.array("link_train") @ torch.tensor([n, 1])
    assert first.num_positive == 256 and global_pairs.shape == (3 * 256, 2)
    assert torch.isin(global_pairs[:256] @ torch.tensor([n, 1]), train).all()  # positives first
    assert torch.equal(global_pairs[256:, 0], global_pairs[:256, 0].repeat_interleave(2))  # its head, new tails
    subject = acm_link.manifest.hetero.type_named("subject")
    tails = global_pairs[:, 1]
    assert bool(((tails >= subject.offset) & (tails < subject.offset + subject.count)).all())
    assert loader.link_steps_per_epoch() == 14


def test_link_sampler_draws_negatives_of_the_relation_types(acm_link):
    """The producers' sampler on a heterogeneous graph: uniform negatives pair a paper with a subject, and the
    batch is a heterogeneous sample of all endpoints with the pairs over its seeds."""
    schema = acm_link.manifest.hetero
    train = acm_link.array(link_array("train"))
    hetero = HeteroNeighborSampler(acm_link.graph, acm_link.array("edge_type"), schema, ["5", "5"])
    sampler = LinkSampler(hetero, train, schema.num_nodes, negatives=3, negative_sampling="uniform")
    sub = sampler.sample(torch.arange(64), seed=7)
    assert sub.is_hetero and sub.pairs is not None and sub.num_positive == 64 and sub.num_pairs == 4 * 64
    pairs = sub.node_ids[sub.pairs]
    assert torch.equal(pairs[:64], train[:64])
    paper, subject = schema.type_named("paper"), schema.type_named("subject")
    for column, kind in ((0, paper), (1, subject)):
        ids = pairs[64:, column]
        assert bool(((ids >= kind.offset) & (ids < kind.offset + kind.count)).all())
    assert sub.num_seeds == torch.unique(pairs).numel() and sub.num_relations == len(schema.relations)
    with pytest.raises(SamplingError, match=r"the pairs' tails are of types \['paper', 'subject'\]"):
        pair_end_types(schema, torch.tensor([[paper.offset, subject.offset], [paper.offset, paper.offset]]))


@pytest.mark.parametrize("encoder", ["hgt", "rgat"])
def test_attention_link_model_trains_and_evaluates_in_process(acm_link, encoder):
    """`HeteroLinkModel` with the HGT or R-GAT encoder: a few steps lower the loss, and the evaluation
    reports every split's AUC, MRR and Hits@50."""
    torch.manual_seed(0)
    loader = HeteroLinkBatches(acm_link, ["3", "3"], 256, eval_fanouts=["3", "3"], eval_batch_size=2048)
    model = HeteroLinkModel(acm_link.manifest.hetero, 16, 2, model=encoder, heads=2, decoder="mlp", dropout=0.0)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for item in loader.pairs_epoch(0):
        loss = link_loss(model, item)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert sum(losses[-3:]) < sum(losses[:3]), losses
    metrics = evaluate_hetero_links(model, loader)
    assert sorted(metrics) == sorted(f"{s}_{m}" for s in ("val", "test") for m in ("auc", "mrr", "hits@50"))
    assert metrics["test_auc"] > 0.6, metrics


@pytest.mark.parametrize(
    ("relation", "problem"),
    [
        (None, "name it with --target-relation HEAD-REL-TAIL, one of paper-written_by-author"),
        ("author-rev_written_by-paper", "is a reverse relation .* name the relation it reverses, paper-written_by"),
        ("paper-wrote-author", "'paper-wrote-author' is not a relation of this graph"),
    ],
)
def test_hetero_split_refusals_name_the_flag(hetero_root, tmp_path, relation, problem):
    spec = EdgeSplitSpec.parse("0.8,0.1,0.1", eval_negatives=10, target_relation=relation)
    with pytest.raises(DatasetSourceError, match=problem):
        prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="t", root=tmp_path, edge_split=spec))
    assert not (tmp_path / "t").exists()


def test_target_relation_on_a_homogeneous_graph_is_refused(tmp_path):
    spec = EdgeSplitSpec.parse("0.8,0.1,0.1", target_relation="paper-cites-paper")
    with pytest.raises(PreparedDatasetError, match="--target-relation names a relation of a heterogeneous graph"):
        prepare_dataset(PrepareConfig(source="synthetic:rmat", name="r", root=tmp_path, edge_split=spec))


def test_cli_target_relation_without_a_split_exits_2_and_writes_nothing(hetero_root, tmp_path):
    from typer.testing import CliRunner

    from graphtier.launcher.cli.app import app

    args = ["dataset", "prepare", f"ogb:{hetero_root}", "--name", "t", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--target-relation", "paper-written_by-author"])
    assert result.exit_code == 2
    assert "--target-relation paper-written_by-author: give the split of its edges too" in result.output
    assert not (tmp_path / "out").exists()


def test_example_without_validation_edges_reports_the_last_epoch(hetero_root, tmp_path, monkeypatch, capsys):
    """A split with no validation edges (0.5,0,0.5) trains and reports the test figures, not a KeyError."""
    import runpy

    spec = EdgeSplitSpec.parse("0.5,0,0.5", eval_negatives=10, target_relation="paper-written_by-author")
    prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="t", root=tmp_path, edge_split=spec))
    args = ["--dataset", "t", "--root", str(tmp_path), "--epochs", "2", "--fanout", "2", "--hidden", "8"]
    monkeypatch.setattr(sys, "argv", ["hetero_link.py", *args])
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    runpy.run_path(str(EXAMPLES / "hetero_link.py"), run_name="__main__")
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["epoch"] == 1 and "val_auc" not in result and 0.0 <= result["test_auc"] <= 1.0, result
