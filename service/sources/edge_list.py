"""Plain-text edge lists (SNAP `.txt`, `.csv`, `.tsv`, stripped `.mtx`; optionally gzipped).

Format: one edge `src dst` per line, separated by whitespace or commas, CRLF or LF line
ends; lines whose first token starts with a comment character (`#`, `%`) are skipped;
columns after the first two (weights, timestamps) are ignored. Ids may be any
non-negative integers: unless they already are `0..N-1` they are remapped in sorted order
and the file's ids kept as `original_ids`.

Header rule (`skip_rows=None`): the first data line is taken to be a size header, and
skipped, only when it has 2 or 3 integer fields, its last field equals the number of data
lines after it and its first field is at least the largest id after it. That matches
`36692 367662` in email-Enron and MatrixMarket's `rows cols nnz` line, and essentially
never a real edge. Pass `skip_rows=k` to skip exactly k data lines instead (0 = none).

Parsing is vectorised numpy over the whole byte buffer (see `numeric_text`), so the
948k-line Slashdot file loads in well under a second.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData
from graphtier.service.sources.numeric_text import NumericText


def load_edge_list(
    path: str | Path,
    *,
    features: str | Path | None = None,
    labels: str | Path | None = None,
    comment: str = "#%",
    skip_rows: int | None = None,
    one_based: bool = False,
    undirected: bool = False,
) -> GraphData:
    """Read an edge list (and optional node features / labels keyed by the file's ids).

    Args:
        path: the edge file; gzip is detected from its magic bytes, not its name.
        features: `.npy` float `[N, F]` (row r = r-th smallest id) or text rows `id f1 f2 ...`.
        labels: `.npy` int `[N]` (same row order) or text rows `id label`; absent ids get -1.
        comment: characters that start a comment line.
        skip_rows: data lines to skip at the top; None applies the module's header rule.
        one_based: ids start at 1 (MatrixMarket); they are shifted down by one.
        undirected: the file stores each undirected edge once; add every reverse edge.
    """
    path = Path(path)
    table = NumericText.read(path, comment=comment)
    if table.num_rows == 0:
        raise DatasetSourceError(path, "contains no edges (every line is empty or a comment)")
    header: list[int] | None = None
    if skip_rows is None:
        header = _detect_header(table)
        skip = 1 if header is not None else 0
    elif not isinstance(skip_rows, int) or isinstance(skip_rows, bool) or skip_rows < 0:
        raise DatasetSourceError(path, f"skip_rows must be an integer >= 0, got {skip_rows!r}")
    else:
        skip = skip_rows
    table = table.drop_rows(skip)
    if table.num_rows == 0:
        raise DatasetSourceError(path, f"contains no edges after skipping {skip} header line(s)")
    _refuse_text_header(path, table, skip)
    table.require_columns(2, exact=False)
    raw = np.stack([table.ints(0), table.ints(1)])
    if int(raw.min()) < 0:
        row = int(np.flatnonzero((raw < 0).any(axis=0))[0])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: negative node id")
    if one_based:
        if int(raw.min()) == 0:
            row = int(np.flatnonzero((raw == 0).any(axis=0))[0])
            raise DatasetSourceError(path, f"line {table.line_of(row)}: id 0 in a file read with one_based=True")
        raw = raw - 1
    uniq = _sorted_unique(raw)
    if uniq[-1] + 1 == uniq.size:
        edges, original = raw, None
    else:
        edges = np.searchsorted(uniq, raw)
        original = torch.from_numpy(uniq + 1 if one_based else uniq)
    num_nodes = int(uniq.size)
    src, dst = torch.from_numpy(edges[0].copy()), torch.from_numpy(edges[1].copy())
    if undirected:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    key = uniq + 1 if one_based else uniq  # the file's spelling of node i's id
    graph = GraphData(
        num_nodes=num_nodes,
        src=src,
        dst=dst,
        features=None if features is None else read_node_features(Path(features), key),
        labels=None if labels is None else read_node_labels(Path(labels), key),
        original_ids=original,
        origin=str(path),
        description={
            "format": "edge_list",
            "edge_lines": table.num_rows,
            "header": header,
            "skipped_rows": skip,
            "one_based": one_based,
            "reverse_edges_added": undirected,
            "remapped_ids": original is not None,
        },
    )
    return graph.validate()


def _sorted_unique(ids: np.ndarray) -> np.ndarray:
    """Sorted distinct ids: a presence bitmap when ids are dense, a sort otherwise."""
    top = int(ids.max())
    if top < max(8 * ids.size, 1 << 20):
        present = np.zeros(top + 1, dtype=bool)
        present[ids.ravel()] = True
        return np.flatnonzero(present)
    return torch.unique(torch.from_numpy(ids.ravel()), sorted=True).numpy()


def _detect_header(table: NumericText) -> list[int] | None:
    """The first data line's values when the header rule in the module docstring holds."""
    if table.num_rows < 2 or table.row_width(0) not in (2, 3) or not table.row_is_integer(0):
        return None
    values = [int(table.int_at(0, c)) for c in range(table.row_width(0))]
    table.columns_are_integer((0, 1))  # parses (and caches) both id columns once for all rows
    rest = table.drop_rows(1)
    if not rest.columns_are_integer((0, 1)):
        return None
    largest = max(int(rest.ints(0).max()), int(rest.ints(1).max()))
    if values[-1] == rest.num_rows and values[0] >= largest:
        return values
    return None


def _refuse_text_header(path: Path, table: NumericText, skipped: int) -> None:
    """Header lines without a comment character (`FromNodeId ToNodeId`, `src,dst`) above the edges:
    an error naming the first one, with the `--skip-rows` value that skips them (and a size line after them)."""
    headers = table.leading_rows_not_integer((0, 1))
    if headers == 0 or headers == table.num_rows:
        return  # no text header; or nothing but text, which `ints` reports as it is
    size_line = 1 if _detect_header(table.drop_rows(headers)) is not None else 0
    skip = skipped + headers + size_line
    raise DatasetSourceError(
        path,
        f"line {table.line_of(0)}: {table.row_text(0)!r} is not an edge (a header line without '#'?)",
        fix=f"pass --skip-rows {skip} (skip_rows={skip} in Python) to skip the {skip} non-comment line(s) "
        "above the first edge, or start the header lines with '#'",
    )


def _rows_for_ids(path: Path, table: NumericText, ids: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Node index of each row's id; unknown or repeated ids are errors naming the line."""
    pos = np.searchsorted(key, ids).clip(max=key.size - 1)
    unknown = key[pos] != ids
    if unknown.any():
        row = int(np.flatnonzero(unknown)[0])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: id {int(ids[row])} is not a node of the edge list")
    order = np.argsort(pos, kind="stable")
    repeated = np.flatnonzero(pos[order][1:] == pos[order][:-1])
    if repeated.size:
        row = int(order[repeated[0] + 1])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: id {int(ids[row])} appears twice")
    return pos


def read_node_features(path: Path, key: np.ndarray) -> torch.Tensor:
    """Features `[N, F]` float32 for the nodes whose file ids are the sorted array `key`."""
    n = key.size
    if path.suffix == ".npy":
        values = _load_npy(path)
        if values.ndim != 2 or values.shape[0] != n:
            raise DatasetSourceError(path, f"features have shape {values.shape}, expected [{n}, F] (one row per node)")
        if values.dtype.kind not in "biuf":
            raise DatasetSourceError(path, f"features must be numeric, got dtype {values.dtype}")
        out = values.astype(np.float32)
        bad = ~np.isfinite(out)
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise DatasetSourceError(path, f"row {row}: features contain NaN or inf")
        return torch.from_numpy(out)
    table = NumericText.read(path)
    if table.num_rows == 0:
        raise DatasetSourceError(path, "contains no feature rows")
    width = table.require_columns(2, exact=True)
    values = table.floats(width)
    bad = ~np.isfinite(values[:, 1:])
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: features contain NaN or inf")
    pos = _rows_for_ids(path, table, table.ints(0), key)
    if table.num_rows != n:
        missing = np.setdiff1d(np.arange(n), pos)
        raise DatasetSourceError(
            path,
            f"has feature rows for {table.num_rows} of {n} nodes "
            f"(no row for id {int(key[missing[0]])}, {missing.size} missing)",
        )
    out = np.empty((n, width - 1), dtype=np.float32)
    out[pos] = values[:, 1:]
    return torch.from_numpy(out)


def read_node_labels(path: Path, key: np.ndarray) -> torch.Tensor:
    """Labels `[N]` int64 (-1 = unlabelled) for the nodes whose file ids are `key`."""
    n = key.size
    if path.suffix == ".npy":
        values = _load_npy(path)
        if values.ndim != 1 or values.shape[0] != n:
            raise DatasetSourceError(path, f"labels have shape {values.shape}, expected [{n}] (one per node)")
        if values.dtype.kind not in "biu":
            raise DatasetSourceError(path, f"labels must be integers, got dtype {values.dtype}")
        out = values.astype(np.int64)
        rows = np.arange(n)
        line_of = None
    else:
        table = NumericText.read(path)
        if table.num_rows == 0:
            raise DatasetSourceError(path, "contains no label rows")
        table.require_columns(2, exact=True)
        rows = _rows_for_ids(path, table, table.ints(0), key)
        out = np.full(n, UNLABELLED, dtype=np.int64)
        out[rows] = table.ints(1)
        line_of = table.line_of
    if out.size and int(out.min()) < UNLABELLED:
        i = int(np.flatnonzero(out < UNLABELLED)[0])
        where = f"line {line_of(int(np.flatnonzero(rows == i)[0]))}" if line_of else f"row {i}"
        raise DatasetSourceError(path, f"{where}: label {int(out[i])} is negative (use -1 for unlabelled)")
    return torch.from_numpy(out)


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise DatasetSourceError(path, "file not found") from None
    except (ValueError, OSError, EOFError) as exc:
        raise DatasetSourceError(path, f"not a readable .npy array ({exc})") from None
