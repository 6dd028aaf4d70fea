"""Metapath features (the preagg model's inputs) against a numpy recomputation from the raw OGB files."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models import build_hetero_model
from graphtier.service.graph.metapath_features import compute_metapath_features
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

HOPS = 2


def _csv(path: Path) -> list[list[str]]:
    return [line.split(",") for line in gzip.decompress(path.read_bytes()).decode().splitlines()]


def _raw_graph(root: Path):
    """(counts, relations as (head, name, tail, edges), features by type, labels, splits) read from the raw files,
    the reverse relations added as prepare adds them."""
    header, values = _csv(root / "raw" / "num-node-dict.csv.gz")
    counts = dict(zip(header, map(int, values), strict=True))
    relations = []
    for head, name, tail in _csv(root / "raw" / "triplet-type-list.csv.gz"):
        edges = np.array(_csv(root / "raw" / "relations" / f"{head}___{name}___{tail}" / "edge.csv.gz"), dtype=int)
        relations += [(head, name, tail, edges), (tail, f"rev_{name}", head, edges[:, ::-1])]
    features = {
        t: np.array(_csv(root / "raw" / "node-feat" / t / "node-feat.csv.gz"), dtype=np.float64)
        for t in counts
        if (root / "raw" / "node-feat" / t).exists()
    }
    labels = np.array(_csv(root / "raw" / "node-label" / "paper" / "node-label.csv.gz"), dtype=int)[:, 0]
    split = root / "split" / "scheme" / "paper"
    splits = {name: np.array(_csv(split / f"{name}.csv.gz"), dtype=int)[:, 0] for name in ("train", "valid", "test")}
    return counts, relations, features, labels, splits


def _mean_matrix(counts: dict, head: str, tail: str, edges: np.ndarray) -> np.ndarray:
    """Dense [tail count, head count]: 1 / (tail node's distinct head neighbours) for each of them."""
    a = np.zeros((counts[tail], counts[head]))
    a[edges[:, 1], edges[:, 0]] = 1.0
    return a / np.maximum(a.sum(axis=1, keepdims=True), 1.0)


def _numpy_blocks(root: Path) -> dict[str, np.ndarray]:
    """Every block by name, in the source's ids: metapaths walked from the papers against the messages."""
    counts, relations, features, labels, splits = _raw_graph(root)
    y = np.zeros((counts["paper"], labels.max() + 1))
    y[splits["train"], labels[splits["train"]]] = 1.0
    paths = [("paper", np.eye(counts["paper"]), "paper")]  # (name, the product so far, its far end type)
    frontier = list(paths)
    for _ in range(HOPS):
        frontier = [
            (f"{name} <{rel}- {head}", product @ _mean_matrix(counts, head, tail, edges), head)
            for name, product, end in frontier
            for head, rel, tail, edges in relations
            if tail == end
        ]
        paths += frontier
    blocks = {name: product @ features[end] for name, product, end in paths if end in features}
    if "paper" not in features:  # a featureless target: propagated train labels, each node's own share out
        for name, product, end in paths[1:]:
            if end == "paper":
                blocks[f"{name} (labels)"] = (product - np.diag(np.diag(product))) @ y
    return blocks


def _computed(root: Path, tmp_path: Path, labels: torch.Tensor | None = None):
    prepare_dataset(PrepareConfig(source=f"ogb:{root}", name="tiny", root=tmp_path / "prepared"))
    dataset = PreparedDataset(tmp_path / "prepared" / "tiny")
    schema = dataset.manifest.hetero
    features = compute_metapath_features(
        dataset.graph,
        dataset.array("edge_type"),
        schema,
        dataset.labels if labels is None else labels,
        dataset.split("train"),
        2,
        HOPS,
        lambda node_type: dataset.array(schema.type_named(node_type).feature_array),
    )
    paper = schema.type_named("paper")
    source = dataset.source_ids(torch.arange(paper.offset, paper.offset + paper.count)) - paper.offset
    return dataset, features, source.numpy()


def _check_against_numpy(root: Path, tmp_path: Path) -> list[str]:
    _, features, source = _computed(root, tmp_path)
    expected = _numpy_blocks(root)
    assert sorted(block.name for block in features.blocks) == sorted(expected)
    for block, columns in zip(features.blocks, torch.split(features.matrix, features.widths, dim=1), strict=True):
        # row i of the matrix is paper i of the prepared (reordered) ids: the source's paper source[i]
        assert np.allclose(columns.numpy(), expected[block.name][source], atol=1e-5), block.name
    return [block.name for block in features.blocks]


def test_features_equal_a_numpy_recomputation_from_the_raw_files(hetero_root, tmp_path):
    names = _check_against_numpy(hetero_root, tmp_path)
    # papers and venues have features, authors none: a paper's own row, its venue's, its co-authors' papers' ...
    assert names[0] == "paper" and "paper <rev_published_in- venue" in names
    assert "paper <rev_written_by- author <written_by- paper" in names
    assert "paper <rev_written_by- author" not in names  # a featureless far end has no rows
    assert not any(name.endswith("(labels)") for name in names)  # a featured target type goes without


def _featureless_target(hetero_root: Path) -> Path:
    shutil.rmtree(hetero_root / "raw" / "node-feat" / "paper")
    return hetero_root


def test_label_features_of_a_featureless_target_equal_numpy_without_the_diagonal(hetero_root, tmp_path):
    names = _check_against_numpy(_featureless_target(hetero_root), tmp_path)
    assert "paper <cites- paper (labels)" in names and "paper <rev_written_by- author <written_by- paper (labels)" in (
        names
    )


def test_label_features_never_carry_a_validation_test_or_own_label(hetero_root, tmp_path):
    dataset, features, _ = _computed(_featureless_target(hetero_root), tmp_path)
    assert sum(block.kind == "labels" for block in features.blocks) >= 3  # cites, rev_cites, co-authors, ...
    labels, train = dataset.labels.clone(), dataset.split("train")
    others = torch.cat([dataset.split("val"), dataset.split("test")])
    changed = labels.clone()
    changed[others] = 1 - changed[others]  # every validation and test label flipped: nothing moves
    assert torch.equal(_computed(hetero_root, tmp_path / "flipped", changed)[1].matrix, features.matrix)
    paper = dataset.manifest.hetero.type_named("paper")
    for node in train.tolist():  # a training node's own label: its own row does not move, others' may
        changed = labels.clone()
        changed[node] = 1 - changed[node]
        matrix = _computed(hetero_root, tmp_path / f"own{node}", changed)[1].matrix
        assert torch.allclose(matrix[node - paper.offset], features.matrix[node - paper.offset], atol=1e-6)
    assert features.matrix.sum() > 0  # the training labels do reach the other papers


def test_model_takes_the_blocks_and_refuses_other_widths(hetero_root, tmp_path):
    dataset, features, _ = _computed(hetero_root, tmp_path)
    model = build_hetero_model("preagg", dataset.manifest.hetero, 8, 2, HOPS, dropout=0.0)
    assert model.widths == features.widths
    assert model(features.matrix).shape == (features.matrix.shape[0], 2)
    model.standardise_by(features.matrix)
    assert torch.allclose(model.shift, features.matrix.mean(dim=0)) and bool((model.scale > 0).all())
    with pytest.raises(GraphtierError, match="PreAggregated takes .* metapath feature columns"):
        model(features.matrix[:, 1:])
