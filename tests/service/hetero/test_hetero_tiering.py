"""Hotness across types: one byte budget over types of different widths, hit ratios per type."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from graphtier.contract.errors import PlacementError
from graphtier.service.graph.csc import build_csc
from graphtier.service.hotness.scores import reverse_pagerank
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.tiering.hetero import build_hetero_tiering_report, split_budget
from graphtier.service.tiering.replay import MIN_RELIABLE_BATCHES, SETTLED_WITHIN


@pytest.fixture
def hetero_dataset(hetero_root, tmp_path) -> PreparedDataset:
    prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="heterogeneous", root=tmp_path / "ds"))
    return PreparedDataset(tmp_path / "ds" / "heterogeneous")


def test_one_byte_budget_takes_the_hottest_rows_of_all_types(hetero_dataset):
    schema = hetero_dataset.manifest.hetero
    paper, venue = schema.type_named("paper"), schema.type_named("venue")  # 16 and 8 bytes a row
    scores = torch.zeros(schema.num_nodes, dtype=torch.float64)
    scores[paper.offset : paper.offset + 6] = torch.tensor([9.0, 7.0, 5.0, 3.0, 2.0, 1.0])
    scores[venue.offset : venue.offset + 2] = torch.tensor([8.0, 4.0])
    # ranking p0 (16 bytes) v0 (8) p1 (16) p2 (16) v1 (8) p3 ...: 56 bytes end after p2
    split = split_budget(schema, scores, 56)
    assert split.rows == {"paper": 3, "venue": 1} and split.used_bytes == 56
    assert split_budget(schema, scores, 63).rows == {"paper": 3, "venue": 1}  # v1 (8 bytes) would end at 64
    assert split_budget(schema, scores, 64).rows == {"paper": 3, "venue": 2}
    assert split_budget(schema, scores, 0).rows == {"paper": 0, "venue": 0}


def test_prepared_rows_of_each_type_are_a_prefix_of_its_range(hetero_dataset):
    schema = hetero_dataset.manifest.hetero
    scores = hetero_dataset.scores
    for budget in (16, 40, 72, 200):
        split = split_budget(schema, scores, budget)
        assert split.used_bytes <= budget
        for name, rows in split.rows.items():
            info = schema.type_named(name)
            inside = scores[info.offset : info.offset + rows]
            outside = scores[info.offset + rows : info.offset + info.count]
            assert inside.numel() == 0 or outside.numel() == 0 or float(inside.min()) >= float(outside.max())


def test_accumulated_pagerank_is_the_sum_of_its_iterations():
    graph = build_csc(4, torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0]))
    train = torch.tensor([0])
    steps = [reverse_pagerank(graph, iterations=i, damping=0.85, train_ids=train) for i in range(4)]
    start = torch.full((4,), 0.25, dtype=torch.float64)
    start[0] *= 4
    total = reverse_pagerank(graph, iterations=3, damping=0.85, train_ids=train, accumulate=True)
    assert torch.allclose(total, start + steps[1] + steps[2] + steps[3])
    assert torch.equal(steps[3], reverse_pagerank(graph, iterations=3, damping=0.85, train_ids=train))


def test_acm_wrpr_reaches_nine_tenths_of_the_oracle_at_ten_percent(prepared_acm):
    report = build_hetero_tiering_report(prepared_acm, budget="10%", fanouts=["10", "5"], batch_size=1024, epochs=3)
    wrpr = next(o for o in report.outcomes if o.score.startswith("as prepared"))
    assert "summed over hops" in wrpr.score
    assert wrpr.ratio_to_oracle >= 0.9, wrpr
    assert wrpr.ratio_to_oracle > report.outcome("degree").ratio_to_oracle
    assert report.featureless_types == ["author", "subject"] and [t.node_type for t in wrpr.per_type] == ["paper"]


def test_budget_beyond_the_feature_bytes_is_refused(hetero_dataset):
    with pytest.raises(PlacementError, match="more than the 112 feature bytes"):
        build_hetero_tiering_report(hetero_dataset, budget="113", fanouts=["2"])


def tiering_report(name: str, root, *args: str) -> subprocess.CompletedProcess:
    """`graphtier dataset tiering-report NAME --out ROOT ARGS...` as a user runs it (exit status 0)."""
    command = [sys.executable, "-m", "graphtier.launcher.cli", "dataset", "tiering-report", name, "--out", str(root)]
    return subprocess.run([*command, *args], capture_output=True, text=True, check=True)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_cli_reports_per_type(hetero_dataset, tmp_path):
    fanout = "paper-rev_cites-paper:2,venue-rev_published_in-paper:1;-1"
    done = tiering_report("heterogeneous", tmp_path / "ds", "--budget", "50%", "--fanout", fanout, "--json")
    report = json.loads(done.stdout)
    oracle = next(o for o in report["outcomes"] if o["score"] == "oracle")
    assert [t["node_type"] for t in oracle["per_type"]] == ["paper", "venue"] and oracle["ratio_to_oracle"] == 1.0
    assert report["fanouts"] == ["paper-rev_cites-paper:2,venue-rev_published_in-paper:1", "-1"]


ACM_SHORT = ("--budget", "30%", "--fanout", "5,2")  # 60 train papers: one batch of 1024 an epoch


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_cli_says_a_short_replay_is_not_reliable(prepared_acm):
    """Three epochs of ACM are three batches, whose few hundred paper rows a 30% budget holds: the
    oracle is 100% by construction, and the report says how little it replayed and that."""
    root = prepared_acm.directory.parent
    report = json.loads(tiering_report("acm", root, *ACM_SHORT, "--epochs", "3", "--json").stdout)
    coverage = report["coverage"]
    assert (report["batches"], coverage["batches"], coverage["epochs"], coverage["stopped"]) == (3, 3, 3, "epochs")
    assert next(o for o in report["outcomes"] if o["score"] == "oracle")["hit_ratio"] == 1.0
    assert 60 < coverage["distinct_rows"] < prepared_acm.manifest.hetero.type_named("paper").count * 0.3
    assert not coverage["reliable"] and "100% by construction" in coverage["warning"]
    shown = " ".join(tiering_report("acm", root, *ACM_SHORT, "--epochs", "3").stdout.split())
    assert f"replayed 3 batches (3 epochs, as --epochs asked), {coverage['distinct_rows']:,} distinct rows" in shown
    assert f"NOT RELIABLE: only 3 batches replayed, fewer than the {MIN_RELIABLE_BATCHES}" in shown
    assert "100% by construction" in shown and "omit --epochs" in shown


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_cli_replays_until_the_figures_settle_by_default(prepared_acm):
    """Without --epochs the same report replays whole epochs until its figures settle: past the
    minimum of batches and past the rows the budget holds, the oracle below 100%."""
    root = prepared_acm.directory.parent
    report = json.loads(tiering_report("acm", root, *ACM_SHORT, "--json").stdout)
    coverage = report["coverage"]
    assert coverage["reliable"] and coverage["warning"] is None and coverage["stopped"] == "settled"
    assert coverage["batches"] == report["batches"] == report["epochs"] >= MIN_RELIABLE_BATCHES
    assert coverage["drift"] <= SETTLED_WITHIN
    assert coverage["distinct_rows"] > prepared_acm.manifest.hetero.type_named("paper").count * 0.3
    assert 0.5 < next(o for o in report["outcomes"] if o["score"] == "oracle")["hit_ratio"] < 1.0
    shown = " ".join(tiering_report("acm", root, *ACM_SHORT).stdout.split())
    assert f"replayed {coverage['batches']} batches" in shown and "figures settled" in shown
    assert "NOT RELIABLE" not in shown
