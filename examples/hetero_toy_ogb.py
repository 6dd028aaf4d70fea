"""Write a small random heterogeneous graph in OGB's heterogeneous raw layout, to try heterogeneous graphs on.

    python examples/hetero_toy_ogb.py toy_hetero
    graphtier dataset prepare ogb:toy_hetero --name toy

Papers (16 features, 3 classes) are written by authors (no features) and cite papers; a
paper's features and its authors lean towards its class, so the relations carry signal.
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np


def _write(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(",".join(map(str, row)) + "\n" for row in rows).encode()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--papers", type=int, default=2000)
    parser.add_argument("--authors", type=int, default=600)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    papers, authors, classes = args.papers, args.authors, 3
    label = rng.integers(0, classes, papers)
    author_class = rng.integers(0, classes, authors)
    written = []
    for p in range(papers):
        same = np.flatnonzero(author_class == label[p])
        for a in rng.choice(same if rng.random() < 0.8 else np.arange(authors), size=2, replace=False):
            written.append((p, int(a)))
    cites = [(p, int(q)) for p in range(papers) for q in rng.choice(papers, size=2, replace=False) if q != p]
    features = rng.normal(0.0, 1.0, (papers, 16))
    features[np.arange(papers), label] += 0.8
    raw = args.root / "raw"
    _write(raw / "num-node-dict.csv.gz", [("author", "paper"), (authors, papers)])
    _write(raw / "triplet-type-list.csv.gz", [("paper", "written_by", "author"), ("paper", "cites", "paper")])
    for name, edges in (("paper___written_by___author", written), ("paper___cites___paper", cites)):
        _write(raw / "relations" / name / "edge.csv.gz", edges)
        _write(raw / "relations" / name / "num-edge-list.csv.gz", [(len(edges),)])
    _write(raw / "node-feat" / "paper" / "node-feat.csv.gz", [[f"{v:.4f}" for v in row] for row in features])
    _write(raw / "nodetype-has-label.csv.gz", [("author", "paper"), ("False", "True")])
    _write(raw / "node-label" / "paper" / "node-label.csv.gz", [(int(y),) for y in label])
    split = args.root / "split" / "random"
    _write(split / "nodetype-has-split.csv.gz", [("author", "paper"), ("False", "True")])
    order = rng.permutation(papers)
    cut = [int(papers * 0.6), int(papers * 0.8)]
    for name, ids in zip(("train", "valid", "test"), np.split(order, cut), strict=True):
        _write(split / "paper" / f"{name}.csv.gz", [(int(i),) for i in sorted(ids)])
    print(f"wrote {args.root}: {papers} papers, {authors} authors, {len(written)} written_by, {len(cites)} cites")


if __name__ == "__main__":
    main()
