"""A tiny heterogeneous graph written in OGB's heterogeneous raw layout, for the heterogeneous-graph tests."""

from __future__ import annotations

import gzip
from pathlib import Path

COUNTS = {"author": 5, "paper": 6, "venue": 2}
WRITTEN_BY = [(0, 0), (0, 1), (1, 1), (2, 2), (3, 3), (4, 4), (5, 0), (5, 4)]
PUBLISHED_IN = [(0, 0), (1, 0), (2, 1), (3, 1), (4, 0), (5, 1)]
CITES = [(1, 0), (2, 0), (3, 1), (4, 2), (5, 3), (5, 4)]
PAPER_FEATURES = [[float(i), 1.0, -float(i), 0.5] for i in range(6)]
VENUE_FEATURES = [[1.0, 0.0], [0.0, 1.0]]
PAPER_LABELS = [0, 1, 0, 1, 0, 1]
SPLIT = {"train": [0, 1, 2], "valid": [3], "test": [4, 5]}


def _gz(path: Path, rows: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(",".join(str(v) for v in (row if isinstance(row, list | tuple) else (row,))) + "\n" for row in rows)
    path.write_bytes(gzip.compress(text.encode()))


def write_hetero_ogb(root: Path) -> Path:
    """Write the tiny heterogeneous graph under `root` (raw/ and split/scheme/); returns `root`."""
    raw = root / "raw"
    _gz(raw / "num-node-dict.csv.gz", [list(COUNTS), list(COUNTS.values())])
    relations = {("paper", "written_by", "author"): WRITTEN_BY, ("paper", "published_in", "venue"): PUBLISHED_IN}
    relations[("paper", "cites", "paper")] = CITES
    _gz(raw / "triplet-type-list.csv.gz", [list(key) for key in relations])
    for (head, name, tail), edges in relations.items():
        folder = raw / "relations" / f"{head}___{name}___{tail}"
        _gz(folder / "edge.csv.gz", edges)
        _gz(folder / "num-edge-list.csv.gz", [len(edges)])
    _gz(raw / "node-feat" / "paper" / "node-feat.csv.gz", PAPER_FEATURES)
    _gz(raw / "node-feat" / "venue" / "node-feat.csv.gz", VENUE_FEATURES)
    _gz(raw / "nodetype-has-label.csv.gz", [list(COUNTS), ["False", "True", "False"]])
    _gz(raw / "node-label" / "paper" / "node-label.csv.gz", PAPER_LABELS)
    split = root / "split" / "scheme"
    _gz(split / "nodetype-has-split.csv.gz", [list(COUNTS), ["False", "True", "False"]])
    for name, ids in SPLIT.items():
        _gz(split / "paper" / f"{name}.csv.gz", ids)
    return root
