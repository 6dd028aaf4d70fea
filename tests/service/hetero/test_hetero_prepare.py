"""Heterogeneous graphs from OGB's heterogeneous raw layout: reading, reverse relations, the prepared form."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
import torch
from hetero_graphs import CITES, COUNTS, PAPER_FEATURES, PAPER_LABELS, PUBLISHED_IN, SPLIT, VENUE_FEATURES, WRITTEN_BY
from typer.testing import CliRunner

from graphtier.contract.errors import DatasetSourceError
from graphtier.launcher.cli.app import app
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.sources.ogb import load_ogb
from graphtier.service.sources.ogb_hetero import load_ogb_hetero


def test_reads_types_relations_features_labels_split(hetero_root):
    g = load_ogb_hetero(hetero_root)
    assert g.num_nodes == COUNTS and g.target_type == "paper"
    keys = [r.key for r in g.relations]
    assert keys == [
        "paper-written_by-author",
        "paper-published_in-venue",
        "paper-cites-paper",
        "author-rev_written_by-paper",
        "venue-rev_published_in-paper",
        "paper-rev_cites-paper",
    ]
    rev = g.relations[3]
    assert rev.reverse_of == "paper-written_by-author"
    assert list(zip(rev.src.tolist(), rev.dst.tolist(), strict=True)) == [(a, p) for p, a in WRITTEN_BY]
    assert g.features["paper"].tolist() == PAPER_FEATURES and g.features["venue"].tolist() == VENUE_FEATURES
    assert "author" not in g.features and "learn an embedding" in g.notes[-1]
    assert g.labels.tolist() == PAPER_LABELS and g.num_classes == 2
    assert {k: v.tolist() for k, v in g.splits.items()} == {"train": [0, 1, 2], "val": [3], "test": [4, 5]}


def test_reverse_relations_can_be_left_out(hetero_root):
    g = load_ogb_hetero(hetero_root, reverse_relations=False)
    assert [r.name for r in g.relations] == ["written_by", "published_in", "cites"]


def test_hetero_csc_groups_each_column_by_relation(hetero_root):
    g = load_ogb_hetero(hetero_root)
    hetero = g.to_global()
    off = g.offsets()
    assert hetero.graph.num_edges == 2 * (len(WRITTEN_BY) + len(PUBLISHED_IN) + len(CITES))
    colptr, etype = hetero.graph.colptr, hetero.edge_type
    for v in range(hetero.graph.num_nodes):
        types = etype[colptr[v] : colptr[v + 1]]
        assert bool((types[1:] >= types[:-1]).all())
    # paper 5's in-neighbours: its authors 0, 4 (rev_written_by), venue 1 (rev_published_in),
    # and cites/rev_cites partners: 5 is cited by none; 5 cites 3 and 4 -> rev_cites brings 3, 4
    p5 = off["paper"] + 5
    got = sorted(
        zip(
            etype[colptr[p5] : colptr[p5 + 1]].tolist(),
            hetero.graph.row[colptr[p5] : colptr[p5 + 1]].tolist(),
            strict=True,
        )
    )
    assert got == [
        (3, off["author"]),
        (3, off["author"] + 4),
        (4, off["venue"] + 1),
        (5, off["paper"] + 3),
        (5, off["paper"] + 4),
    ]


@pytest.mark.parametrize(
    ("path", "text", "message"),
    [
        ("raw/num-node-dict.csv.gz", "author,paper\n5\n", "one row of the same width"),
        ("raw/triplet-type-list.csv.gz", "paper,written_by,editor\n", "node type 'editor' is not in num-node-dict"),
        (
            "raw/triplet-type-list.csv.gz",
            "paper,cites,paper\npaper,cites,paper\n",
            "line 2: relation paper,cites,paper is listed twice",
        ),
        (
            "raw/relations/paper___cites___paper/edge.csv.gz",
            "0,1\n7,2\n1,2\n0,3\n0,4\n1,5\n",
            "head id 7 outside [0, 6)",
        ),
        ("raw/nodetype-has-label.csv.gz", "author,paper,venue\nTrue,True,False\n", "exactly one target type"),
        ("split/scheme/paper/test.csv.gz", "4\n1\n", "shares 1 node id(s) with train"),  # a train paper tested
    ],
)
def test_bad_input_names_file_and_problem(hetero_root, path, text, message):
    (hetero_root / path).write_bytes(gzip.compress(text.encode()))
    with pytest.raises(DatasetSourceError) as info:
        load_ogb_hetero(hetero_root)
    assert path.split("/")[-1].split(".")[0] in str(info.value) and message in str(info.value)


def test_homogeneous_reader_points_to_the_hetero_one(hetero_root):
    with pytest.raises(DatasetSourceError, match="as a heterogeneous graph"):
        load_ogb(hetero_root)


def test_prepare_writes_hetero_dataset_reordered_per_type(hetero_root, tmp_path):
    manifest = prepare_dataset(PrepareConfig(source=f"ogb:{hetero_root}", name="heterogeneous", root=tmp_path / "ds"))
    schema = manifest.hetero
    assert schema is not None and schema.target_type == "paper"
    assert [(t.name, t.count, t.offset, t.feature_dim) for t in schema.node_types] == [
        ("author", 5, 0, 0),
        ("paper", 6, 5, 4),
        ("venue", 2, 11, 2),
    ]
    assert [r.num_edges for r in schema.relations] == [8, 6, 6, 8, 6, 6]
    ds = PreparedDataset(tmp_path / "ds" / "heterogeneous")
    new_to_old, scores = ds.new_to_old, ds.scores
    for lo, hi in zip(schema.offsets()[:-1], schema.offsets()[1:], strict=True):
        assert sorted(new_to_old[lo:hi].tolist()) == list(range(lo, hi))  # types keep their id ranges
        assert bool((scores[lo + 1 : hi] <= scores[lo : hi - 1]).all())  # hottest first within a type
    paper = schema.type_named("paper")
    local = new_to_old[paper.offset : paper.offset + paper.count] - paper.offset
    assert torch.equal(ds.array("features.paper"), torch.tensor(PAPER_FEATURES)[local])
    assert ds.array("features.venue").shape == (2, 2)
    labels = ds.labels
    assert labels[: paper.offset].eq(-1).all() and labels[paper.offset + paper.count :].eq(-1).all()
    assert labels[paper.offset : paper.offset + paper.count].tolist() == [PAPER_LABELS[i] for i in local.tolist()]
    train = ds.split("train")
    assert sorted(new_to_old[train].tolist()) == [paper.offset + i for i in SPLIT["train"]]
    # the reordered heterogeneous CSC is the same edge set with the same relations
    graph, etype = ds.graph, ds.array("edge_type")
    dst = graph.dst_of_edges()
    edges = {(int(new_to_old[s]), int(new_to_old[d]), int(t)) for s, d, t in zip(graph.row, dst, etype, strict=True)}
    cites = schema.relations.index(next(r for r in schema.relations if r.name == "cites"))
    assert {(s - paper.offset, d - paper.offset) for s, d, t in edges if t == cites} == set(CITES)


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_cli_prepares_and_says_types(hetero_root, graphtier_home):
    cli = [sys.executable, "-m", "graphtier.launcher.cli"]
    done = subprocess.run(
        [
            *cli,
            "dataset",
            "prepare",
            f"ogb:{hetero_root}",
            "--name",
            "heterogeneous",
            "--no-reverse-relations",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    manifest = json.loads(done.stdout)
    assert [r["name"] for r in manifest["hetero"]["relations"]] == ["written_by", "published_in", "cites"]
    # a heterogeneous dataset's rows are per type (feature_dim 0): list and inspect give each type's width
    widths = f"author:learned, paper:{len(PAPER_FEATURES[0])}, venue:{len(VENUE_FEATURES[0])}"
    runner = CliRunner(env={"COLUMNS": "240"})
    for args in (["dataset", "list"], ["dataset", "inspect", "heterogeneous"]):
        shown = runner.invoke(app, args, catch_exceptions=False)
        assert shown.exit_code == 0 and widths in shown.output, shown.output
    bad = subprocess.run(
        [*cli, "dataset", "prepare", f"ogb:{hetero_root}", "--name", "t2", "--scale", "3"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "scale not accepted by heterogeneous ogb" in bad.stderr
