"""OGB raw reader on a tiny dataset written in tmp_path in the exact layout `ogb` unpacks."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.sources.ogb import load_ogb

EDGES = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (1, 3)]


def _gz(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(str(v) for v in (row if isinstance(row, tuple) else (row,))) + "\n" for row in rows)
    path.write_bytes(gzip.compress(text.encode()))


@pytest.fixture
def ogb_root(tmp_path) -> Path:
    """A 5-node `ogbn_arxiv`-shaped root: raw/*.csv.gz plus split/time/*.csv.gz."""
    root = tmp_path / "ogbn_arxiv"
    raw = root / "raw"
    _gz(raw / "edge.csv.gz", EDGES)
    _gz(raw / "num-node-list.csv.gz", [5])
    _gz(raw / "num-edge-list.csv.gz", [len(EDGES)])
    _gz(raw / "node-feat.csv.gz", [(f"{i}.5", f"-{i}.25", "1e-3") for i in range(5)])
    _gz(raw / "node-label.csv.gz", [3, 0, "nan", 2, 1])
    _gz(raw / "node_year.csv.gz", [2019] * 5)
    _gz(root / "split" / "time" / "train.csv.gz", [0, 1])
    _gz(root / "split" / "time" / "valid.csv.gz", [3])
    _gz(root / "split" / "time" / "test.csv.gz", [4])
    (root / "processed").mkdir()
    (root / "RELEASE_v1.txt").write_text("")
    return root


def test_reads_graph_features_labels_split(ogb_root):
    g = load_ogb(ogb_root)
    assert g.num_nodes == 5 and list(zip(g.src.tolist(), g.dst.tolist(), strict=True)) == EDGES
    assert g.description["inverse_edges_added"] is False  # arxiv is directed in ogb's table
    assert g.features.dtype == torch.float32 and g.features[2].tolist() == [2.5, -2.25, pytest.approx(1e-3)]
    assert g.labels.tolist() == [3, 0, -1, 2, 1]
    assert {k: v.tolist() for k, v in g.splits.items()} == {"train": [0, 1], "val": [3], "test": [4]}
    assert g.description["split_scheme"] == "time"


def test_inverse_edges_by_name_or_option(ogb_root):
    products = ogb_root.rename(ogb_root.parent / "ogbn_products")
    g = load_ogb(products)
    assert g.num_edges == 2 * len(EDGES) and g.description["inverse_edges_added"] is True
    assert (g.src[len(EDGES)].item(), g.dst[len(EDGES)].item()) == (1, 0)
    assert load_ogb(products, add_inverse_edge=False).num_edges == len(EDGES)


def _error(root: Path, **kwargs) -> str:
    with pytest.raises(DatasetSourceError) as info:
        load_ogb(root, **kwargs)
    return str(info.value)


def test_missing_raw_file(ogb_root):
    (ogb_root / "raw" / "num-edge-list.csv.gz").unlink()
    message = _error(ogb_root)
    assert str(ogb_root / "raw" / "num-edge-list.csv.gz") in message and "missing OGB raw file" in message
    assert "has no raw/ folder" in _error(ogb_root / "raw")


def test_edge_count_and_range(ogb_root):
    _gz(ogb_root / "raw" / "num-edge-list.csv.gz", [7])
    assert "has 6 edges but num-edge-list says 7" in _error(ogb_root)
    _gz(ogb_root / "raw" / "num-edge-list.csv.gz", [6])
    _gz(ogb_root / "raw" / "edge.csv.gz", EDGES[:5] + [(1, 5)])
    assert f"{ogb_root / 'raw' / 'edge.csv.gz'}: line 6: node id outside [0, 5)" in _error(ogb_root)


def test_split_id_out_of_range(ogb_root):
    path = ogb_root / "split" / "time" / "test.csv.gz"
    _gz(path, [4, 9])
    assert f"{path}: line 2: node id 9 outside [0, 5)" in _error(ogb_root)


def test_multi_task_labels_and_bad_label(ogb_root):
    path = ogb_root / "raw" / "node-label.csv.gz"
    _gz(path, [(0, 1)] * 5)
    assert f"{path}: has 2 label columns (multi-task)" in _error(ogb_root)
    _gz(path, [0, 1, "2.5", 0, 1])
    assert f"{path}: line 3: label 2.5 is not a class id" in _error(ogb_root)


def test_feature_rows_and_truncated_gzip(ogb_root):
    path = ogb_root / "raw" / "node-feat.csv.gz"
    _gz(path, [("1.0", "2.0")] * 4)
    assert f"{path}: has 4 rows, expected one per node (5)" in _error(ogb_root)
    data = gzip.compress(b"1.0,2.0\n" * 5)
    path.write_bytes(data[: len(data) - 6])  # cut into the CRC/size trailer
    assert f"{path}: truncated or corrupt gzip data" in _error(ogb_root)


def test_split_scheme_choice(ogb_root):
    (ogb_root / "split" / "other").mkdir()
    assert "holds split schemes ['other', 'time']; pass split_scheme=" in _error(ogb_root)
    assert load_ogb(ogb_root, split_scheme="time").splits["val"].tolist() == [3]
    assert "no such split scheme" in _error(ogb_root, split_scheme="random")
