"""Edge-list reader: the shared SNAP / road files parse to their README statistics, and
malformed files fail with messages that name the file, the line and the problem."""

from __future__ import annotations

import gzip
import time

import numpy as np
import pytest
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.csc import build_csc
from graphtier.service.sources.edge_list import load_edge_list


def _undirected_unique(graph) -> int:
    csc = build_csc(graph.num_nodes, graph.src, graph.dst, undirected=True, drop_self_loops=True)
    return csc.num_edges // 2


def test_slashdot_gzip_crlf_parses_fast(shared_datasets):
    start = time.perf_counter()
    g = load_edge_list(shared_datasets / "snap_soc-Slashdot0902" / "soc-Slashdot0902.txt.gz")
    elapsed = time.perf_counter() - start
    assert (g.num_nodes, g.num_edges) == (82168, 948464)
    assert g.original_ids is None  # ids are already 0..82167
    assert int((g.src == g.dst).sum()) == 78303
    assert _undirected_unique(g) == 504230
    assert elapsed < 8.0, f"parsing took {elapsed:.1f}s"


def test_enron_header_line_is_detected(shared_datasets):
    g = load_edge_list(shared_datasets / "snap_email-Enron" / "email-Enron.txt")
    assert (g.num_nodes, g.num_edges) == (36692, 367662)
    assert g.description["header"] == [36692, 367662]
    assert g.src[:3].tolist() == [0, 1, 1] and g.dst[:3].tolist() == [1, 0, 2]
    assert _undirected_unique(g) == 183831


def test_condmat_non_contiguous_ids_are_remapped(shared_datasets):
    g = load_edge_list(shared_datasets / "snap_ca-CondMat" / "CA-CondMat.txt")
    assert (g.num_nodes, g.num_edges) == (23133, 186936)
    assert g.original_ids is not None
    assert int(g.original_ids.min()) == 1 and int(g.original_ids.max()) == 108299
    assert bool((g.original_ids[1:] > g.original_ids[:-1]).all())
    # first edge line of the file is "81626 11894"
    assert g.original_ids[g.src[0]].item() == 81626 and g.original_ids[g.dst[0]].item() == 11894
    assert _undirected_unique(g) == 93439


def test_luxembourg_one_based_lower_triangle(shared_datasets):
    path = shared_datasets / "road_luxembourg_osm" / "luxembourg_osm.mtx"
    g = load_edge_list(path, one_based=True, undirected=True)
    assert g.num_nodes == 114599 and g.original_ids is None
    assert g.num_edges == 2 * 119666
    # first line "2 1" becomes 1 -> 0, plus its reverse
    assert (g.src[0].item(), g.dst[0].item()) == (1, 0)
    assert _undirected_unique(g) == 119666
    degree = torch.bincount(g.dst, minlength=g.num_nodes)
    assert int(degree.max()) == 6


def test_separators_comments_and_extra_columns(write):
    path = write("g.csv", "% a comment\r\n# another\r\n10,20,0.5\r\n\r\n20 , 30,1e3\r\n30\t10\t7\r\n")
    g = load_edge_list(path)
    assert g.num_nodes == 3 and g.original_ids.tolist() == [10, 20, 30]
    assert g.src.tolist() == [0, 1, 2] and g.dst.tolist() == [1, 2, 0]
    assert g.description["header"] is None


def test_header_rule_and_explicit_skip(write):
    # "5 3" passes the rule (3 edge lines follow, 5 >= largest id 4).
    assert load_edge_list(write("h.txt", "5 3\n0 1\n1 2\n2 4\n")).num_edges == 3
    # "2 3" is an edge: 3 lines follow but 2 < largest id 4, so it is kept.
    g = load_edge_list(write("e.txt", "2 3\n0 1\n1 2\n2 4\n"))
    assert g.num_edges == 4 and g.description["header"] is None
    g = load_edge_list(write("s.txt", "src dst\n0 1\n1 2\n"), skip_rows=1)
    assert g.num_edges == 2


def test_features_and_labels_by_original_id(write, tmp_path):
    edges = write("g.txt", "100 200\n200 300\n")
    feats = write("f.txt", "300 3.0 3.5\n100 1.0 1.5\n200 2.0 2.5\n")
    labels = write("y.txt", "200 4\n100 1\n")
    g = load_edge_list(edges, features=feats, labels=labels)
    assert g.features.dtype == torch.float32
    assert g.features.tolist() == [[1.0, 1.5], [2.0, 2.5], [3.0, 3.5]]
    assert g.labels.tolist() == [1, 4, -1]
    np.save(tmp_path / "f.npy", np.arange(6, dtype=np.float64).reshape(3, 2))
    np.save(tmp_path / "y.npy", np.array([0, 1, 2]))
    g = load_edge_list(edges, features=tmp_path / "f.npy", labels=tmp_path / "y.npy")
    assert g.features[2].tolist() == [4.0, 5.0] and g.labels.tolist() == [0, 1, 2]


def _error(**kwargs) -> str:
    with pytest.raises(DatasetSourceError) as info:
        load_edge_list(**kwargs)
    return str(info.value)


def test_truncated_gzip_names_file(write):
    data = gzip.compress(b"0 1\n1 2\n" * 5000)
    path = write("cut.txt.gz", data[: len(data) // 2])
    message = _error(path=path)
    assert str(path) in message and "truncated or corrupt gzip" in message


def test_non_numeric_token_reports_line(write):
    path = write("bad.txt", "# header\n0 1\n1 2\n2 x7\n3 4\n")
    message = _error(path=path)
    assert f"{path}: line 4: 'x7' is not an integer" in message


def test_snap_header_lines_without_hash_get_a_skip_rows_hint(write):
    cases = (
        ("snap.txt", "# Directed graph\nFromNodeId\tToNodeId\n0\t1\n1\t2\n2\t0\n", 2, "'FromNodeId ToNodeId'", 1),
        ("csv.csv", "src,dst,weight\n0,1,5\n1,2,5\n2,0,5\n", 1, "'src dst weight'", 1),
        ("sized.txt", "FromNodeId ToNodeId\nNodes: 3 Edges: 3\n3 3\n0 1\n1 2\n2 0\n", 1, "'FromNodeId ToNodeId'", 3),
    )
    for name, text, line, shown, skip in cases:
        path = write(name, text)
        message = _error(path=path)
        assert f"{path}: line {line}: {shown} is not an edge (a header line without '#'?)" in message, message
        assert f"pass --skip-rows {skip} (skip_rows={skip} in Python)" in message, message
        assert load_edge_list(path, skip_rows=skip).num_edges == 3


def test_empty_and_comment_only_files(write):
    for name, text in (("empty.txt", ""), ("comments.txt", "# nothing\n% here\n\n")):
        path = write(name, text)
        message = _error(path=path)
        assert str(path) in message and "no edges" in message


def test_single_column_line_is_rejected(write):
    path = write("one.txt", "0 1\n2\n")
    assert f"{path}: line 2: has 1 fields, expected 2 or more" in _error(path=path)


def test_unknown_id_in_features_and_labels(write):
    edges = write("g.txt", "0 1\n1 2\n")
    feats = write("f.txt", "0 1.0\n1 1.0\n9 1.0\n")
    assert f"{feats}: line 3: id 9 is not a node of the edge list" in _error(path=edges, features=feats)
    labels = write("y.txt", "1 0\n\n7 1\n")
    assert f"{labels}: line 3: id 7 is not a node of the edge list" in _error(path=edges, labels=labels)


def test_feature_row_count_mismatch(write, tmp_path):
    edges = write("g.txt", "0 1\n1 2\n")
    feats = write("f.txt", "0 1.0\n2 1.0\n")
    message = _error(path=edges, features=feats)
    assert str(feats) in message and "rows for 2 of 3 nodes" in message and "no row for id 1" in message
    np.save(tmp_path / "f.npy", np.zeros((4, 2), dtype=np.float32))
    message = _error(path=edges, features=tmp_path / "f.npy")
    assert "f.npy" in message and "expected [3, F]" in message


def test_nan_and_garbage_in_features(write, tmp_path):
    edges = write("g.txt", "0 1\n1 2\n")
    feats = write("f.txt", "0 1.0 2.0\n1 nan 2.0\n2 1.0 2.0\n")
    assert f"{feats}: line 2: features contain NaN or inf" in _error(path=edges, features=feats)
    feats = write("g.txt.feat", "0 1.0 2.0\n1 1.0 2.0\n2 1.0 abc\n")
    assert f"{feats}: line 3: 'abc' is not a number" in _error(path=edges, features=feats)
    np.save(tmp_path / "f.npy", np.array([[1.0], [np.inf], [0.0]]))
    assert "row 1: features contain NaN or inf" in _error(path=edges, features=tmp_path / "f.npy")


def test_duplicate_feature_id_and_ragged_rows(write):
    edges = write("g.txt", "0 1\n1 2\n")
    feats = write("f.txt", "0 1.0\n1 1.0\n1 1.0\n")
    assert f"{feats}: line 3: id 1 appears twice" in _error(path=edges, features=feats)
    feats = write("r.txt", "0 1.0 2.0\n1 1.0\n2 1.0 2.0\n")
    assert f"{feats}: line 2: has 2 fields, expected 3" in _error(path=edges, features=feats)


def test_one_based_file_with_zero_id(write):
    path = write("m.mtx", "1 2\n0 1\n")
    assert f"{path}: line 2: id 0 in a file read with one_based=True" in _error(path=path, one_based=True)


def test_missing_file(tmp_path):
    path = tmp_path / "nope.txt"
    assert f"{path}: file not found" in _error(path=path)
