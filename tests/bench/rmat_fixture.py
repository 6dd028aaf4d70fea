"""The benchmark graph: a symmetrised R-MAT graph as a graphtier `CSCGraph`, cached on disk.

Same generator and parameters as the reference baseline script (`rmat_graph.py`: scale 21,
edge factor 12, a=.57 b=.19 c=.19, seed 0, random relabel, self loops dropped, symmetrised,
deduplicated), so graphtier's figures and the quoted PyG/DGL figures are on the same graph
(about 2M nodes / 48M edges at scale 21). Building it takes about a minute on 2 cores, so
benches share one cached copy under `$TMPDIR/graphtier-bench/graphs/`.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from machine import bench_cache

from graphtier.contract.errors import GraphtierError
from graphtier.service.graph import CSCGraph, build_csc
from graphtier.service.sources.synthetic import rmat_edges as synthetic_rmat_edges

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = bench_cache("graphs")


@dataclass(frozen=True)
class RMatParams:
    """R-MAT generator parameters; `d = 1 - a - b - c` is implied."""

    scale: int = 21
    edge_factor: int = 12
    a: float = 0.57
    b: float = 0.19
    c: float = 0.19
    seed: int = 0

    def check(self) -> None:
        """Reject parameters the generator cannot use (they come from the command line)."""
        if not 1 <= self.scale <= 30:
            raise GraphtierError(f"R-MAT scale {self.scale} is out of range: use 1..30 (2^scale nodes)")
        if self.edge_factor < 1:
            raise GraphtierError(f"R-MAT edge factor {self.edge_factor} must be >= 1")
        if min(self.a, self.b, self.c) <= 0 or self.a + self.b + self.c >= 1:
            raise GraphtierError(f"R-MAT probabilities a={self.a} b={self.b} c={self.c} must be > 0 with a+b+c < 1")

    def cache_name(self) -> str:
        return f"rmat_s{self.scale}_ef{self.edge_factor}_a{self.a}_b{self.b}_c{self.c}_seed{self.seed}.pt"


def rmat_edges(params: RMatParams) -> tuple[torch.Tensor, torch.Tensor]:
    """Directed R-MAT edges (with duplicates and self loops), randomly relabelled.

    One quadrant choice per bit level for all edges at once; the random stream matches the
    reference generator draw for draw, so the same seed gives the same graph.
    """
    params.check()
    gen = torch.Generator().manual_seed(params.seed)
    num_nodes = 1 << params.scale
    num_edges = params.edge_factor * num_nodes
    src, dst = synthetic_rmat_edges(params.scale, num_edges, gen, a=params.a, b=params.b, c=params.c)
    perm = torch.randperm(num_nodes, generator=gen)  # Graph500 relabel: no id/degree correlation
    return perm[src], perm[dst]


def generate_rmat_csc(params: RMatParams) -> CSCGraph:
    """The symmetrised, deduplicated, self-loop-free R-MAT graph as CSC."""
    src, dst = rmat_edges(params)
    return build_csc(1 << params.scale, src, dst, undirected=True, drop_self_loops=True)


def _load(path: Path, num_nodes: int) -> CSCGraph | None:
    """The cached graph, or None when the file is unreadable or not this graph."""
    try:
        blob = torch.load(path, weights_only=True)
        colptr, row = blob["colptr"], blob["row"]
    except Exception as exc:  # a truncated or foreign file is rebuilt, not fatal
        print(f"[rmat] ignoring unreadable cache {path}: {exc}", file=sys.stderr)
        return None
    ok = (
        colptr.dtype == torch.int64
        and row.dtype == torch.int64
        and colptr.numel() == num_nodes + 1
        and int(colptr[-1]) == row.numel()
    )
    if not ok:
        print(f"[rmat] ignoring inconsistent cache {path}", file=sys.stderr)
        return None
    return CSCGraph(colptr=colptr, row=row)


def load_or_build_rmat(params: RMatParams, cache_dir: Path | None = DEFAULT_CACHE_DIR) -> CSCGraph:
    """Load the graph from `cache_dir`, or generate it and save it there (atomically).

    `cache_dir=None` always generates and saves nothing.
    """
    params.check()
    path = cache_dir / params.cache_name() if cache_dir is not None else None
    if path is not None and path.exists():
        t0 = time.perf_counter()
        graph = _load(path, 1 << params.scale)
        if graph is not None:
            print(f"[rmat] loaded {path} in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            return graph
    t0 = time.perf_counter()
    graph = generate_rmat_csc(params)
    print(
        f"[rmat] generated scale {params.scale} (N={graph.num_nodes:,}, E={graph.num_edges:,}) "
        f"in {time.perf_counter() - t0:.1f}s",
        file=sys.stderr,
    )
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        torch.save({"colptr": graph.colptr, "row": graph.row}, tmp)
        os.replace(tmp, path)
        print(f"[rmat] cached at {path}", file=sys.stderr)
    return graph
