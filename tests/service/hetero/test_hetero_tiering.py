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


def test_cli_reports_per_type(hetero_dataset, tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "tiering-report",
            "heterogeneous",
            "--out",
            str(tmp_path / "ds"),
        ]
        + ["--budget", "50%", "--fanout", "paper-rev_cites-paper:2,venue-rev_published_in-paper:1;-1", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout)
    oracle = next(o for o in report["outcomes"] if o["score"] == "oracle")
    assert [t["node_type"] for t in oracle["per_type"]] == ["paper", "venue"] and oracle["ratio_to_oracle"] == 1.0
    assert report["fanouts"] == ["paper-rev_cites-paper:2,venue-rev_published_in-paper:1", "-1"]
