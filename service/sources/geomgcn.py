"""Geom-GCN's node-classification datasets (film/Actor, chameleon, squirrel, cornell, texas, wisconsin)
from the folder layout of bingzhewei/geom-gcn's `new_data/<name>/`.

Two text files, each with a header line:

- `out1_node_feature_label.txt`: `node_id<TAB>features<TAB>label` per node. Film writes its features
  as the comma-separated indices of the nonzero entries of a binary vector (`521,92,111`); the
  others write every value (`0,1,0,...`). `feature_format="auto"` tells them apart by row length:
  rows of differing lengths are indices, rows all of one length are dense values.
- `out1_graph_edges.txt`: `node_id<TAB>node_id` per edge, directed as listed; repeated lines are
  one edge once prepared (the CSC is deduplicated), as PyG's `Actor` coalesces them.

Node ids are `0..N-1`, one row each. The folder brings no split: Geom-GCN's ten
`<name>_split_0.6_0.2_K.npz` mask files are given with `--split` (`split_from_file`). Every problem
is a `DatasetSourceError` naming the file and its 1-based line.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData

NODE_FILE = "out1_node_feature_label.txt"
EDGE_FILE = "out1_graph_edges.txt"
FeatureFormat = Literal["auto", "indices", "dense"]
FEATURE_FORMATS: tuple[str, ...] = ("auto", "indices", "dense")
# Widest index rows read without --feature-dim: Geom-GCN's are 932 to 2,325 wide, so a larger largest
# index is far more likely a corrupt line than a feature, and would allocate N x index floats.
MAX_INFERRED_WIDTH = 1 << 20
_INTEGER = re.compile(r"\s*[+-]?[0-9]+\s*")


def _lines(path: Path) -> tuple[list[str], int]:
    """The data lines of `path` and the 1-based line number of the first: a header line (its first
    tab-separated field not an integer) is skipped, CRLF ends and a final newline are accepted."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise DatasetSourceError(
            path, f"file not found (a Geom-GCN dataset folder holds {NODE_FILE} and {EDGE_FILE})"
        ) from None
    except IsADirectoryError:
        raise DatasetSourceError(path, "is a directory, expected a file") from None
    except UnicodeDecodeError as exc:
        raise DatasetSourceError(path, f"is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise DatasetSourceError(path, f"cannot be read ({exc.strerror})") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    first = 1
    if lines and not _is_int(lines[0].split("\t", 1)[0]):
        lines, first = lines[1:], 2
    return lines, first


def _is_int(text: str) -> bool:
    return _INTEGER.fullmatch(text) is not None


def _int(path: Path, line: int, text: str, what: str) -> int:
    if not _is_int(text):
        raise DatasetSourceError(path, f"line {line}: {what} {text[:40]!r} is not an integer")
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise DatasetSourceError(path, f"line {line}: {what} {text.strip()[:40]} is outside the int64 range")
    return value


def _fields(path: Path, line: int, text: str, count: int, names: str) -> list[str]:
    fields = text.split("\t")
    if len(fields) != count:
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise DatasetSourceError(
            path, f"line {line}: expected {count} tab-separated fields ({names}), found {len(fields)}: {shown!r}"
        )
    return fields


def _node_rows(path: Path) -> tuple[np.ndarray, list[str], np.ndarray, list[int]]:
    """Each node row's id, feature field, label, and line number; ids checked to be `0..N-1` once each."""
    lines, first = _lines(path)
    if not lines:
        raise DatasetSourceError(path, "contains no node rows")
    ids = np.empty(len(lines), dtype=np.int64)
    labels = np.empty(len(lines), dtype=np.int64)
    feature_fields: list[str] = []
    line_numbers = list(range(first, first + len(lines)))
    for row, (number, text) in enumerate(zip(line_numbers, lines, strict=True)):
        node, features, label = _fields(path, number, text, 3, "node id, features, label")
        ids[row] = _int(path, number, node, "node id")
        labels[row] = _int(path, number, label, "label")
        if labels[row] < UNLABELLED:
            raise DatasetSourceError(path, f"line {number}: label {labels[row]} is negative (-1 = unlabelled)")
        feature_fields.append(features.strip())
    count = ids.size
    outside = np.flatnonzero((ids < 0) | (ids >= count))
    if outside.size:
        row = int(outside[0])
        raise DatasetSourceError(
            path,
            f"line {line_numbers[row]}: node id {ids[row]} is outside 0..{count - 1} "
            f"(the file has {count} node rows, ids must number them 0..N-1)",
        )
    first_row = np.full(count, -1, dtype=np.int64)
    for row, node in enumerate(ids.tolist()):
        if first_row[node] >= 0:
            raise DatasetSourceError(
                path,
                f"line {line_numbers[row]}: node id {node} appears again "
                f"(first on line {line_numbers[first_row[node]]})",
            )
        first_row[node] = row
    return ids, feature_fields, labels, line_numbers


def _detect_format(fields: list[str]) -> Literal["indices", "dense"]:
    """Indices when the rows' value counts differ (or one is empty), dense values when they are all alike."""
    counts = {field.count(",") if field else -1 for field in fields}
    return "dense" if len(counts) == 1 and -1 not in counts else "indices"


def _index_features(path: Path, fields: list[str], lines: list[int], width: int | None) -> np.ndarray:
    """Binary rows `[N, width]` from each row's nonzero indices; `width` None: the largest index + 1."""
    rows: list[int] = []
    cols: list[int] = []
    for row, (field, line) in enumerate(zip(fields, lines, strict=True)):
        if not field:
            continue
        for token in field.split(","):
            index = _int(path, line, token, "feature index")
            if index < 0:
                raise DatasetSourceError(path, f"line {line}: feature index {index} is negative")
            if width is not None and index >= width:
                raise DatasetSourceError(
                    path,
                    f"line {line}: feature index {index} is past the feature width {width} (indices 0..{width - 1})",
                    fix="give the right --feature-dim, or --feature-format dense for rows of values",
                )
            rows.append(row)
            cols.append(index)
    if width is None:
        width = max(cols, default=-1) + 1
        if width == 0:
            raise DatasetSourceError(path, "no node has a feature index (every feature field is empty)")
        if width > MAX_INFERRED_WIDTH:
            line = lines[rows[cols.index(width - 1)]]
            raise DatasetSourceError(
                path,
                f"line {line}: feature index {width - 1} would make every row {width:,} wide",
                fix=f"give --feature-dim to read rows wider than {MAX_INFERRED_WIDTH:,}",
            )
    out = np.zeros((len(fields), width), dtype=np.float32)
    out[np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)] = 1.0
    return out


def _dense_features(path: Path, fields: list[str], lines: list[int], width: int | None) -> np.ndarray:
    """Rows `[N, width]` of comma-separated values, every row the same length."""
    expected = width
    out: np.ndarray | None = None
    for row, (field, line) in enumerate(zip(fields, lines, strict=True)):
        tokens = field.split(",") if field else []
        if expected is None:
            expected = len(tokens)
        if len(tokens) != expected:
            against = f"--feature-dim {width}" if width is not None else f"line {lines[0]} has {expected}"
            raise DatasetSourceError(path, f"line {line}: {len(tokens)} feature values, {against}")
        if out is None:
            if expected == 0:
                raise DatasetSourceError(path, f"line {line}: no feature values")
            out = np.empty((len(fields), expected), dtype=np.float32)
        try:
            values = [float(token) for token in tokens]
        except ValueError:
            bad = next(token for token in tokens if not _is_float(token))
            raise DatasetSourceError(path, f"line {line}: feature value {bad[:40]!r} is not a number") from None
        if not all(math.isfinite(value) for value in values):
            raise DatasetSourceError(path, f"line {line}: feature values contain NaN or inf")
        out[row] = values
    assert out is not None  # the node file has at least one row
    return out


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _edges(path: Path, num_nodes: int, nodes_file: str) -> tuple[np.ndarray, np.ndarray]:
    lines, first = _lines(path)
    if not lines:
        raise DatasetSourceError(path, "contains no edges")
    edges = np.empty((2, len(lines)), dtype=np.int64)
    for column, text in enumerate(lines):
        line = first + column
        src, dst = _fields(path, line, text, 2, "source node id, target node id")
        for end, field in enumerate((src, dst)):
            node = _int(path, line, field, "node id")
            if not 0 <= node < num_nodes:
                raise DatasetSourceError(
                    path, f"line {line}: node id {node} is not a node of {nodes_file} (ids 0..{num_nodes - 1})"
                )
            edges[end, column] = node
    return edges[0], edges[1]


def load_geomgcn(
    directory: str | Path,
    *,
    feature_dim: int | None = None,
    feature_format: FeatureFormat = "auto",
) -> GraphData:
    """Read a Geom-GCN dataset folder (see module docstring) as a directed graph without a split.

    Args:
        directory: the folder holding `out1_node_feature_label.txt` and `out1_graph_edges.txt`.
        feature_dim: the feature width; an index at or past it is an error. None: the largest
            index + 1 for index rows (932 for film, as Geom-GCN and PyG read it), the row length
            for dense rows.
        feature_format: "indices" (film's nonzero indices), "dense" (every value) or "auto".
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetSourceError(directory, f"is not a directory (expected a folder holding {NODE_FILE}, {EDGE_FILE})")
    if feature_format not in FEATURE_FORMATS:
        raise DatasetSourceError(
            directory, f"feature_format must be one of {', '.join(FEATURE_FORMATS)}, got {feature_format!r}"
        )
    if feature_dim is not None and (
        isinstance(feature_dim, bool) or not isinstance(feature_dim, int) or feature_dim < 1
    ):
        raise DatasetSourceError(directory, f"feature_dim must be an integer >= 1, got {feature_dim!r}")
    nodes_path, edges_path = directory / NODE_FILE, directory / EDGE_FILE
    for path in (nodes_path, edges_path):
        if not path.exists():
            raise DatasetSourceError(
                path, f"file not found (a Geom-GCN dataset folder holds {NODE_FILE} and {EDGE_FILE})"
            )
    ids, fields, labels, lines = _node_rows(nodes_path)
    chosen = _detect_format(fields) if feature_format == "auto" else feature_format
    read = _index_features if chosen == "indices" else _dense_features
    by_row = read(nodes_path, fields, lines, feature_dim)
    features = np.empty_like(by_row)
    features[ids] = by_row
    node_labels = np.empty_like(labels)
    node_labels[ids] = labels
    src, dst = _edges(edges_path, ids.size, NODE_FILE)
    distinct = np.unique(src * ids.size + dst)
    graph = GraphData(
        num_nodes=int(ids.size),
        src=torch.from_numpy(src),
        dst=torch.from_numpy(dst),
        features=torch.from_numpy(features),
        labels=torch.from_numpy(node_labels),
        origin=str(directory),
        description={
            "format": "geomgcn",
            "name": directory.name,
            "feature_format": chosen,
            "feature_format_detected": feature_format == "auto",
            "edge_lines": int(src.size),
            "duplicate_edge_lines": int(src.size - distinct.size),
            "self_loops": int((distinct // ids.size == distinct % ids.size).sum()),
        },
    )
    return graph.validate()
