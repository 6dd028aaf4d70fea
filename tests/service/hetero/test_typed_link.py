"""Link prediction on a typed graph's target relation: the split made at prepare (val and test edges
out of message passing both ways, negatives of the right types) and an R-GCN learning ACM's
paper-subject links well above chance."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphtier.contract.errors import DatasetSourceError, PreparedDatasetError
from graphtier.launcher.runtime.typed_link import TypedLinkBatches
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.edge_split import EdgeSplitSpec, link_array

TARGET = "paper-has_subject-subject"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture(scope="module")
def acm_link(shared_datasets, prepared_root) -> PreparedDataset:
    source = shared_datasets / "ogb_hetero_acm"
    if not source.is_dir():
        pytest.skip(f"{source} not found")
    spec = EdgeSplitSpec.parse("0.85,0.05,0.10", eval_negatives=5000, target_relation=TARGET)
    prepare_dataset(PrepareConfig(source=f"ogb:{source}", name="acm-link", root=prepared_root, edge_split=spec))
    return PreparedDataset(prepared_root / "acm-link")


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
    loader = TypedLinkBatches(acm_link, ["5", "5"], 256, negatives=2)
    first = next(loader.pairs_epoch(0))
    n = acm_link.manifest.hetero.num_nodes
    global_pairs = first.batch.subgraph.node_ids[first.pairs]  # seed positions back to global ids
    train = acm_link.array("link_train") @ torch.tensor([n, 1])
    assert first.num_positive == 256 and global_pairs.shape == (3 * 256, 2)
    assert torch.isin(global_pairs[:256] @ torch.tensor([n, 1]), train).all()  # positives first
    assert torch.equal(global_pairs[256:, 0], global_pairs[:256, 0].repeat(2))  # each positive's head, new tails
    subject = acm_link.manifest.hetero.type_named("subject")
    tails = global_pairs[:, 1]
    assert bool(((tails >= subject.offset) & (tails < subject.offset + subject.count)).all())
    assert loader.link_steps_per_epoch() == 14


def test_two_torchrun_ranks_learn_paper_subject_links(acm_link, tmp_path):
    """examples/typed_link.py under real torchrun (2 gloo ranks, DDP, embeddings summed over ranks)."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
        "--log-dir", str(tmp_path / "torchelastic"), str(EXAMPLES / "typed_link.py"),
        "--dataset", "acm-link", "--root", str(acm_link.directory.parent),
        "--epochs", "1", "--fanout", "5;5", "--hidden", "32",
    ]  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ranks"] == 2 and result["relation"] == TARGET
    assert {f"{s}_{m}" for s in ("val", "test") for m in ("auc", "mrr", "hits@50")} <= set(result)
    assert result["test_auc"] >= 0.8, result


@pytest.mark.parametrize(
    ("relation", "problem"),
    [
        (None, "name it with --target-relation HEAD-REL-TAIL, one of paper-written_by-author"),
        ("author-rev_written_by-paper", "is a reverse relation .* name the relation it reverses, paper-written_by"),
        ("paper-wrote-author", "'paper-wrote-author' is not a relation of this graph"),
    ],
)
def test_typed_split_refusals_name_the_flag(typed_root, tmp_path, relation, problem):
    spec = EdgeSplitSpec.parse("0.8,0.1,0.1", eval_negatives=10, target_relation=relation)
    with pytest.raises(DatasetSourceError, match=problem):
        prepare_dataset(PrepareConfig(source=f"ogb:{typed_root}", name="t", root=tmp_path, edge_split=spec))
    assert not (tmp_path / "t").exists()


def test_target_relation_on_a_homogeneous_graph_is_refused(tmp_path):
    spec = EdgeSplitSpec.parse("0.8,0.1,0.1", target_relation="paper-cites-paper")
    with pytest.raises(PreparedDatasetError, match="--target-relation names a relation of a typed graph"):
        prepare_dataset(PrepareConfig(source="synthetic:rmat", name="r", root=tmp_path, edge_split=spec))


def test_cli_target_relation_without_a_split_exits_2_and_writes_nothing(typed_root, tmp_path):
    from typer.testing import CliRunner

    from graphtier.launcher.cli.app import app

    args = ["dataset", "prepare", f"ogb:{typed_root}", "--name", "t", "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--target-relation", "paper-written_by-author"])
    assert result.exit_code == 2
    assert "--target-relation paper-written_by-author: give the split of its edges too" in result.output
    assert not (tmp_path / "out").exists()


def test_example_without_validation_edges_reports_the_last_epoch(typed_root, tmp_path, monkeypatch, capsys):
    """A split with no validation edges (0.5,0,0.5) trains and reports the test figures, not a KeyError."""
    import runpy

    spec = EdgeSplitSpec.parse("0.5,0,0.5", eval_negatives=10, target_relation="paper-written_by-author")
    prepare_dataset(PrepareConfig(source=f"ogb:{typed_root}", name="t", root=tmp_path, edge_split=spec))
    args = ["--dataset", "t", "--root", str(tmp_path), "--epochs", "2", "--fanout", "2", "--hidden", "8"]
    monkeypatch.setattr(sys, "argv", ["typed_link.py", *args])
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    runpy.run_path(str(EXAMPLES / "typed_link.py"), run_name="__main__")
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["epoch"] == 1 and "val_auc" not in result and 0.0 <= result["test_auc"] <= 1.0, result
