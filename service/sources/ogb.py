"""OGB node-property-prediction datasets from the raw files the `ogb` package unpacks.

Layout (`ogb/io/read_graph_raw.py`, `ogb/nodeproppred/dataset.py`), e.g. `ogbn_arxiv/`:
`raw/edge.csv.gz` (E rows `src,dst`), `raw/num-node-list.csv.gz` and `raw/num-edge-list.csv.gz`
(one row: a single graph), optional `raw/node-feat.csv.gz` (N rows of floats) and
`raw/node-label.csv.gz` (N rows, one label; NaN = unlabelled), and
`split/<scheme>/{train,valid,test}.csv.gz` (one node id per line). Only `raw/` and `split/`
are read (never `processed/`), nothing is downloaded and the `ogb` package is not needed.
Undirected OGB graphs store each edge once; like ogb's loader we add the reverse edges,
using ogb's `add_inverse_edge` table for the known names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData
from graphtier.service.sources.numeric_text import NumericText

# ogb/nodeproppred/master.csv: "add_inverse_edge" per dataset (folder name spelling).
_ADD_INVERSE_EDGE = {"ogbn_products": True, "ogbn_proteins": True, "ogbn_arxiv": False, "ogbn_papers100M": False}
_SPLIT_FILES = {"train": "train", "val": "valid", "test": "test"}


def _find(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.csv.gz", f"{stem}.csv"):
        if (folder / name).is_file():
            return folder / name
    return None


def _require(folder: Path, stem: str) -> Path:
    found = _find(folder, stem)
    if found is None:
        raise DatasetSourceError(folder / f"{stem}.csv.gz", "missing OGB raw file")
    return found


def _single_count(folder: Path, stem: str) -> int:
    path = _require(folder, stem)
    table = NumericText.read(path)
    if table.num_rows != 1:
        raise DatasetSourceError(
            path, f"lists {table.num_rows} graphs; only single-graph (ogbn-*) datasets are supported"
        )
    table.require_columns(1, exact=True)
    return int(table.ints(0)[0])


def _id_column(path: Path, num_nodes: int) -> np.ndarray:
    table = NumericText.read(path)
    if table.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    table.require_columns(1, exact=True)
    ids = table.ints(0)
    bad = (ids < 0) | (ids >= num_nodes)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: node id {int(ids[row])} outside [0, {num_nodes})")
    return ids


def _labels(path: Path, num_nodes: int) -> torch.Tensor:
    table = NumericText.read(path)
    width = table.require_columns(1, exact=True) if table.num_rows else 1
    if width != 1:
        raise DatasetSourceError(
            path, f"has {width} label columns (multi-task); only single-label classification is supported"
        )
    if table.num_rows != num_nodes:
        raise DatasetSourceError(path, f"has {table.num_rows} rows, expected one per node ({num_nodes})")
    values = table.floats(1)[:, 0]
    known = ~np.isnan(values)
    bad = known & ((values < 0) | (values != np.floor(values)) | ~np.isfinite(values))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: label {float(values[row]):g} is not a class id")
    labels = np.full(num_nodes, UNLABELLED, dtype=np.int64)
    labels[known] = values[known].astype(np.int64)
    return torch.from_numpy(labels)


def _features(path: Path, num_nodes: int) -> torch.Tensor:
    table = NumericText.read(path)
    if table.num_rows != num_nodes:
        raise DatasetSourceError(path, f"has {table.num_rows} rows, expected one per node ({num_nodes})")
    values = table.floats(table.require_columns(1, exact=True)).astype(np.float32)
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DatasetSourceError(path, f"line {table.line_of(row)}: features contain NaN or inf")
    return torch.from_numpy(values)


def _read_splits(folder: Path, num_nodes: int) -> dict[str, torch.Tensor]:
    """The train, val and test ids of one split folder: each id once, and no id in two splits (a
    test id that is also a train id would report accuracy on training nodes)."""
    splits: dict[str, torch.Tensor] = {}
    seen: dict[str, tuple[Path, np.ndarray]] = {}
    for name, stem in _SPLIT_FILES.items():
        found = _require(folder, stem)
        ids = _id_column(found, num_nodes)
        if np.unique(ids).size != ids.size:
            raise DatasetSourceError(found, "lists a node id more than once")
        for other, (other_path, other_ids) in seen.items():
            shared = np.intersect1d(ids, other_ids)
            if shared.size:
                raise DatasetSourceError(
                    found, f"shares {shared.size} node id(s) with {other} ({other_path}), e.g. {int(shared[0])}"
                )
        seen[name] = (found, ids)
        splits[name] = torch.from_numpy(ids)
    return splits


def _split_folder(root: Path, scheme: str | None) -> Path | None:
    split_root = root / "split"
    if not split_root.is_dir():
        if scheme is not None:
            raise DatasetSourceError(split_root, f"missing; split_scheme={scheme!r} was asked for")
        return None
    schemes = sorted(p.name for p in split_root.iterdir() if p.is_dir())
    if scheme is None:
        if len(schemes) != 1:
            raise DatasetSourceError(split_root, f"holds split schemes {schemes}; pass split_scheme= to pick one")
        scheme = schemes[0]
    if scheme not in schemes:
        raise DatasetSourceError(split_root / scheme, f"no such split scheme (available: {schemes})")
    return split_root / scheme


def load_ogb(
    directory: str | Path,
    *,
    split_scheme: str | None = None,
    add_inverse_edge: bool | None = None,
) -> GraphData:
    """Read an unpacked OGB node-property dataset root (the folder holding `raw/` and `split/`).

    Args:
        directory: dataset root such as `dataset/ogbn_arxiv`.
        split_scheme: sub-folder of `split/`; inferred when there is exactly one.
        add_inverse_edge: add the reverse of every edge; None uses ogb's setting for the
            known dataset names (products, proteins: yes; arxiv, papers100M: no) and no otherwise.
    """
    root = Path(directory)
    raw = root / "raw"
    if not raw.is_dir():
        raise DatasetSourceError(root, "has no raw/ folder; pass the OGB dataset root (e.g. dataset/ogbn_arxiv)")
    if (raw / "num-node-dict.csv.gz").is_file():
        raise DatasetSourceError(
            raw,
            "is a heterogeneous OGB graph (num-node-dict.csv.gz); this reader takes homogeneous graphs",
            fix="`graphtier dataset prepare ogb:DIR` reads it as a heterogeneous graph (sources/ogb_hetero.py)",
        )
    if _find(raw, "edge") is None and (raw / "data.npz").is_file():
        raise DatasetSourceError(raw / "data.npz", "binary OGB raw format is not supported; expected edge.csv.gz")
    num_nodes = _single_count(raw, "num-node-list")
    num_edges = _single_count(raw, "num-edge-list")
    edge_path = _require(raw, "edge")
    table = NumericText.read(edge_path)
    if table.num_rows != num_edges:
        raise DatasetSourceError(edge_path, f"has {table.num_rows} edges but num-edge-list says {num_edges}")
    if num_edges == 0:
        raise DatasetSourceError(edge_path, "contains no edges")
    table.require_columns(2, exact=True)
    src, dst = table.ints(0), table.ints(1)
    bad = (np.minimum(src, dst) < 0) | (np.maximum(src, dst) >= num_nodes)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise DatasetSourceError(edge_path, f"line {table.line_of(row)}: node id outside [0, {num_nodes})")
    inverse = _ADD_INVERSE_EDGE.get(root.resolve().name, False) if add_inverse_edge is None else add_inverse_edge
    if inverse:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])

    feat_path, label_path = _find(raw, "node-feat"), _find(raw, "node-label")
    features = _features(feat_path, num_nodes) if feat_path is not None else None
    labels = _labels(label_path, num_nodes) if label_path is not None else None
    folder = _split_folder(root, split_scheme)
    splits: dict[str, torch.Tensor] = {}
    if folder is not None:
        splits = _read_splits(folder, num_nodes)
    graph = GraphData(
        num_nodes=num_nodes,
        src=torch.from_numpy(src),
        dst=torch.from_numpy(dst),
        features=features,
        labels=labels,
        splits=splits,
        origin=str(root),
        description={
            "format": "ogb_nodeproppred_raw",
            "name": root.resolve().name,
            "split_scheme": folder.name if folder is not None else None,
            "inverse_edges_added": inverse,
            "raw_edges": num_edges,
        },
    )
    return graph.validate()
