"""`geomgcn:DIR` (film's nonzero-index rows and the dense rows of the other Geom-GCN datasets) through
`dataset prepare` with the data's split file: edges, features, labels and split match what the test
wrote, in the source's ids; malformed files are refused with the file and line named, exit 2."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphtier.contract.errors import DatasetSourceError
from graphtier.launcher.cli.app import app
from graphtier.service.prepared import PreparedDataset
from graphtier.service.sources import load_source

NUM_NODES, WIDTH, NUM_CLASSES = 36, 20, 4
NODE_HEADER = "node_id\tfeature(feature_amount:19)\tlabel"


def _graph(seed: int) -> dict[str, np.ndarray]:
    """A random graph: binary features, labels, directed edges with repeats and a self-loop, a split."""
    rng = np.random.default_rng(seed)
    features = (rng.random((NUM_NODES, WIDTH)) < 0.2).astype(np.float32)
    features[np.arange(NUM_NODES), rng.integers(0, WIDTH, NUM_NODES)] = 1.0  # every row has a nonzero
    features[0, WIDTH - 1] = 1.0  # the largest index occurs, so the width read is WIDTH
    src, dst = rng.integers(0, NUM_NODES, 90), rng.integers(0, NUM_NODES, 90)
    src, dst = np.append(src, [src[0], 5]), np.append(dst, [dst[0], 5])
    order = rng.permutation(NUM_NODES)
    return {
        "features": features,
        "labels": rng.integers(0, NUM_CLASSES, NUM_NODES),
        "src": src,
        "dst": dst,
        "row_order": order,  # node rows are not in id order in Geom-GCN's files
        "train": order[:18],
        "val": order[18:27],
        "test": order[27:],
    }


def _write(folder: Path, graph: dict[str, np.ndarray], *, dense: bool) -> Path:
    """The graph in Geom-GCN's layout: out1_node_feature_label.txt and out1_graph_edges.txt."""
    folder.mkdir()
    rows = [NODE_HEADER]
    for node in graph["row_order"]:
        values = graph["features"][node]
        field = ",".join(f"{v:g}" for v in values) if dense else ",".join(map(str, np.flatnonzero(values)[::-1]))
        rows.append(f"{node}\t{field}\t{graph['labels'][node]}")
    (folder / "out1_node_feature_label.txt").write_text("\n".join(rows) + "\n")
    edges = "".join(f"{s}\t{d}\n" for s, d in zip(graph["src"], graph["dst"], strict=True))
    (folder / "out1_graph_edges.txt").write_text("node_id\tnode_id\n" + edges)
    return folder


def _split_file(path: Path, graph: dict[str, np.ndarray]) -> Path:
    """One Geom-GCN split: uint8 masks of shape [N]."""
    masks = {}
    for part in ("train", "val", "test"):
        mask = np.zeros(NUM_NODES, dtype=np.uint8)
        mask[graph[part]] = 1
        masks[f"{part}_mask"] = mask
    np.savez(path, **masks)
    return path


def _prepare(tmp_path: Path, folder: Path, *extra: str):
    return CliRunner().invoke(
        app,
        ["dataset", "prepare", f"geomgcn:{folder}", "--name", "g", "--out", str(tmp_path / "prepared"), *extra],
    )


def test_prepare_reads_the_files_and_the_split_in_the_source_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    graph = _graph(seed=0)
    folder = _write(tmp_path / "film", graph, dense=False)
    split = _split_file(tmp_path / "film_split_0.6_0.2_0.npz", graph)
    done = _prepare(tmp_path, folder, "--split", str(split))
    assert done.exit_code == 0, done.output
    assert f"split: train/val/test 18/9/9 from {split}" in done.output

    dataset = PreparedDataset.open("g", tmp_path / "prepared")
    source = dataset.new_to_old
    expected_edges = set(zip(graph["src"].tolist(), graph["dst"].tolist(), strict=True))
    csc = dataset.graph
    dst = torch.repeat_interleave(torch.arange(NUM_NODES), csc.colptr.diff())
    edges = set(zip(source[csc.row.long()].tolist(), source[dst].tolist(), strict=True))
    assert edges == expected_edges  # directed as listed, repeated lines one edge, the self-loop kept
    assert dataset.manifest.feature_dim == WIDTH and dataset.manifest.num_classes == NUM_CLASSES
    assert torch.equal(dataset.features[dataset.old_to_new], torch.from_numpy(graph["features"]))
    assert torch.equal(dataset.labels[dataset.old_to_new], torch.from_numpy(graph["labels"]))
    for part in ("train", "val", "test"):
        assert sorted(dataset.source_ids(dataset.split(part)).tolist()) == sorted(graph[part].tolist())
    description = dataset.manifest.source_description
    assert description["feature_format"] == "indices"
    assert description["duplicate_edge_lines"] == len(graph["src"]) - len(expected_edges)


def test_dense_rows_are_read_as_values(tmp_path):
    graph = _graph(seed=1)
    graph["features"][3] *= 0.25  # values, not only 0/1
    folder = _write(tmp_path / "chameleon", graph, dense=True)
    rows = folder / "out1_node_feature_label.txt"
    read = load_source(f"geomgcn:{folder}", split_file=str(_split_file(tmp_path / "split.npz", graph)))
    assert read.description["feature_format"] == "dense"
    assert torch.equal(read.features, torch.from_numpy(graph["features"]))
    assert torch.equal(read.labels, torch.from_numpy(graph["labels"]))
    assert torch.equal(read.src, torch.from_numpy(graph["src"])) and torch.equal(
        read.dst, torch.from_numpy(graph["dst"])
    )
    assert torch.equal(read.splits["test"], torch.from_numpy(np.sort(graph["test"])))
    with pytest.raises(DatasetSourceError, match=rf"{rows}: line 2: {WIDTH} feature values, --feature-dim 30"):
        load_source(f"geomgcn:{folder}", default_split=True, feature_dim=30)


def _break(folder: Path, name: str, line: int, text: str) -> None:
    path = folder / name
    lines = path.read_text().splitlines()
    lines[line - 1] = text.format(id=lines[line - 1].split("\t")[0])  # {id}: the line's own node id
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("file", "line", "text", "options", "message"),
    [
        ("nodes", 4, "7\t1,2", {}, "line 4: expected 3 tab-separated fields (node id, features, label), found 2"),
        ("nodes", 5, "x7\t1,2\t0", {}, "line 5: node id 'x7' is not an integer"),
        ("nodes", 6, "36\t1,2\t0", {}, "line 6: node id 36 is outside 0..35"),
        ("nodes", 3, "{id}\t1,25\t0", {"feature_dim": 20}, "line 3: feature index 25 is past the feature width 20"),
        ("nodes", 7, "{id}\t1,two\t0", {}, "line 7: feature index 'two' is not an integer"),
        ("nodes", 8, "{id}\t4,9999999\t0", {}, "line 8: feature index 9999999 would make every row 10,000,000 wide"),
        ("edges", 9, "4\t36", {}, "line 9: node id 36 is not a node of out1_node_feature_label.txt (ids 0..35)"),
        ("edges", 3, "4 5", {}, "line 3: expected 2 tab-separated fields (source node id, target node id)"),
    ],
    ids=["fields", "id-text", "id-range", "index-width", "index-text", "index-huge", "edge-id", "edge-fields"],
)
def test_a_malformed_line_is_refused_naming_file_and_line(tmp_path, file, line, text, options, message):
    folder = _write(tmp_path / "film", _graph(seed=0), dense=False)
    name = {"nodes": "out1_node_feature_label.txt", "edges": "out1_graph_edges.txt"}[file]
    _break(folder, name, line, text)
    with pytest.raises(DatasetSourceError) as refused:
        load_source(f"geomgcn:{folder}", default_split=True, **options)
    assert str(refused.value).startswith(f"{folder / name}: {message}")


def test_prepare_without_a_file_exits_2_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    folder = _write(tmp_path / "film", _graph(seed=0), dense=False)
    (folder / "out1_graph_edges.txt").unlink()
    done = _prepare(tmp_path, folder, "--default-split")
    assert done.exit_code == 2, done.output
    assert f"{folder / 'out1_graph_edges.txt'}: file not found" in " ".join(done.output.split())
    assert not (tmp_path / "prepared" / "g").exists()


def test_a_repeated_node_row_names_both_lines(tmp_path):
    folder = _write(tmp_path / "film", _graph(seed=0), dense=True)
    lines = (folder / "out1_node_feature_label.txt").read_text().splitlines()
    lines[9] = lines[2].replace(lines[2].split("\t")[0], lines[4].split("\t")[0], 1)
    (folder / "out1_node_feature_label.txt").write_text("\n".join(lines) + "\n")
    node = lines[4].split("\t")[0]
    with pytest.raises(DatasetSourceError, match=f"line 10: node id {node} appears again \\(first on line 5\\)"):
        load_source(f"geomgcn:{folder}", default_split=True)
