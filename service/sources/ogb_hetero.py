"""OGB heterogeneous node-property datasets (ogbn-mag's raw layout) into a `HeteroGraphData`.

Layout (`ogb/io/read_graph_raw.py`: `read_csv_heterograph_raw`, `read_node_label_hetero`,
`read_nodesplitidx_split_hetero`): `raw/num-node-dict.csv.gz` (a header of type names, one row
of counts), `raw/triplet-type-list.csv.gz` (rows `head,relation,tail`),
`raw/relations/<head>___<rel>___<tail>/edge.csv.gz` (rows `head_id,tail_id`, type-local) with
its `num-edge-list.csv.gz`, `raw/node-feat/<type>/node-feat.csv.gz` for the types that have
features, `raw/nodetype-has-label.csv.gz` with `raw/node-label/<type>/node-label.csv.gz`, and
`split/<scheme>/nodetype-has-split.csv.gz` with `split/<scheme>/<type>/{train,valid,test}.csv.gz`.
Relations are stored one way, as ogbn-mag stores them; `reverse_relations` (default on) adds
`tail-rev_<rel>-head` for each, so messages reach the head type too.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.contract.hetero import check_type_name
from graphtier.service.graph.hetero_data import HeteroGraphData, Relation
from graphtier.service.sources.label_classes import label_classes
from graphtier.service.sources.numeric_text import NumericText
from graphtier.service.sources.ogb import _features, _find, _labels, _read_splits, _require, _split_folder


def is_hetero_ogb(directory: str | Path) -> bool:
    """Whether `directory` holds OGB's heterogeneous raw layout (it has raw/num-node-dict)."""
    return _find(Path(directory) / "raw", "num-node-dict") is not None


def _text_rows(path: Path) -> list[list[str]]:
    data = path.read_bytes()
    if path.suffix == ".gz":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise DatasetSourceError(path, f"is not a readable gzip file ({exc})") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DatasetSourceError(path, f"is not UTF-8 text ({exc})") from exc
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def _type_dict(path: Path) -> dict[str, str]:
    """A header of type names and one row of values (num-node-dict, nodetype-has-*)."""
    rows = _text_rows(path)
    if len(rows) != 2 or len(rows[0]) != len(rows[1]):
        raise DatasetSourceError(path, "expected a header of node types and one row of the same width")
    for name in rows[0]:
        try:
            check_type_name(name, "node type")
        except ValueError as exc:
            raise DatasetSourceError(path, str(exc)) from None
    return dict(zip(rows[0], rows[1], strict=True))


def _flagged_types(path: Path, types: list[str]) -> list[str]:
    flags = _type_dict(path)
    unknown = sorted(set(flags) - set(types))
    if unknown:
        raise DatasetSourceError(path, f"names node types {unknown} that num-node-dict does not have")
    bad = {k: v for k, v in flags.items() if v not in ("True", "False")}
    if bad:
        raise DatasetSourceError(path, f"values must be True or False, got {bad}")
    return [t for t in types if flags.get(t) == "True"]


def _node_counts(raw: Path) -> dict[str, int]:
    path = _require(raw, "num-node-dict")
    counts = {}
    for name, value in _type_dict(path).items():
        if not value.isdigit():
            raise DatasetSourceError(path, f"count {value!r} of node type {name!r} is not a non-negative int")
        counts[name] = int(value)
    if sum(counts.values()) == 0:
        raise DatasetSourceError(path, "the graph is empty: it has no nodes")
    return counts


def _relation(raw: Path, head: str, name: str, tail: str, counts: dict[str, int]) -> Relation:
    folder = raw / "relations" / f"{head}___{name}___{tail}"
    edge_path = _require(folder, "edge")
    expected = NumericText.read(_require(folder, "num-edge-list"))
    table = NumericText.read(edge_path)
    if expected.num_rows == 1 and int(expected.ints(0)[0]) != table.num_rows:
        raise DatasetSourceError(
            edge_path, f"has {table.num_rows} edges but num-edge-list says {int(expected.ints(0)[0])}"
        )
    if table.num_rows == 0:
        return Relation(head, name, tail, torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    table.require_columns(2, exact=True)
    src, dst = table.ints(0), table.ints(1)
    for ids, node_type, side in ((src, head, "head"), (dst, tail, "tail")):
        bad = (ids < 0) | (ids >= counts[node_type])
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DatasetSourceError(
                edge_path,
                f"line {table.line_of(row)}: {side} id {int(ids[row])} outside [0, {counts[node_type]}) "
                f"of node type {node_type!r}",
            )
    return Relation(head, name, tail, torch.from_numpy(src), torch.from_numpy(dst))


def _relations(raw: Path, counts: dict[str, int]) -> list[Relation]:
    path = _require(raw, "triplet-type-list")
    relations: list[Relation] = []
    for line, row in enumerate(_text_rows(path), start=1):
        if len(row) != 3:
            raise DatasetSourceError(path, f"line {line}: expected head,relation,tail, got {','.join(row)!r}")
        head, name, tail = row
        for node_type in (head, tail):
            if node_type not in counts:
                raise DatasetSourceError(path, f"line {line}: node type {node_type!r} is not in num-node-dict")
        try:
            check_type_name(name, "relation")
        except ValueError as exc:
            raise DatasetSourceError(path, f"line {line}: {exc}") from None
        if any((r.head, r.name, r.tail) == (head, name, tail) for r in relations):
            raise DatasetSourceError(path, f"line {line}: relation {head},{name},{tail} is listed twice")
        relations.append(_relation(raw, head, name, tail, counts))
    if not relations:
        raise DatasetSourceError(path, "lists no relations")
    return relations


def load_ogb_hetero(
    directory: str | Path,
    *,
    split_scheme: str | None = None,
    reverse_relations: bool = True,
    num_classes: int | None = None,
) -> HeteroGraphData:
    """Read an unpacked heterogeneous OGB node-property dataset (the folder holding raw/ and split/).

    Args:
        directory: dataset root such as `dataset/ogbn_mag`.
        split_scheme: sub-folder of `split/`; inferred when there is exactly one.
        reverse_relations: add `tail-rev_<rel>-head` for every relation.
        num_classes: declared class count; labels must lie below it (else they are made dense).
    """
    root = Path(directory)
    raw = root / "raw"
    counts = _node_counts(raw)
    types = list(counts)
    relations = _relations(raw, counts)
    features = {}
    for node_type in types:
        found = _find(raw / "node-feat" / node_type, "node-feat")
        if found is not None:
            features[node_type] = _features(found, counts[node_type])
    labelled = _flagged_types(_require(raw, "nodetype-has-label"), types)
    if len(labelled) != 1:
        raise DatasetSourceError(
            raw / "nodetype-has-label.csv.gz",
            f"labels {len(labelled)} node types ({labelled}); node classification needs exactly one target type",
        )
    target = labelled[0]
    label_path = _require(raw / "node-label" / target, "node-label")
    checked = label_classes(_labels(label_path, counts[target]), origin=str(label_path), num_classes=num_classes)
    folder = _split_folder(root, split_scheme)
    if folder is None:
        raise DatasetSourceError(root / "split", "missing; a heterogeneous dataset needs its split/<scheme>/ folder")
    split_types = _flagged_types(_require(folder, "nodetype-has-split"), types)
    if split_types != [target]:
        raise DatasetSourceError(
            folder / "nodetype-has-split.csv.gz", f"splits {split_types}, expected the labelled type [{target!r}]"
        )
    splits = _read_splits(folder / target, counts[target])
    graph = HeteroGraphData(
        num_nodes=counts,
        relations=relations,
        target_type=target,
        features=features,
        labels=checked.labels,
        splits=splits,
        origin=str(root),
        description={
            "format": "ogb_nodeproppred_hetero_raw",
            "name": root.resolve().name,
            "split_scheme": folder.name,
            "reverse_relations_added": reverse_relations,
        },
        notes=[checked.note] if checked.note else [],
        class_count=checked.num_classes,
        class_labels=checked.class_labels,
    )
    if reverse_relations:
        graph.add_reverse_relations()
    featureless = [t for t in types if t not in features]
    if featureless:
        graph.notes.append(
            f"node types without features: {', '.join(featureless)}; models learn an embedding per node of these types"
        )
    return graph
