"""Node hotness scores (Min et al., KDD'22, section 3.1 and Algorithm 1).

- `degree`: out-degree. A node is read whenever one of its out-neighbours is expanded.
- `rpr`: reverse PageRank. Each node v splits its score evenly among its in-neighbours
  (the nodes a sampler may pick from v), so reach through multiple hops counts.
- `wrpr`: weighted reverse PageRank, Algorithm 1: training nodes start with weight
  N/|train| times the uniform 1/N, and only a few iterations run (paper: 5) so that the
  start bias toward where sampling begins is kept rather than converged away.
  With `fanout=k` (our extension) a node v passes score to each in-neighbour with the
  probability that a k-neighbour sample of v picks it, min(1, k/d_v), instead of 1/d_v
  (Algorithm 1 models a fanout of one); scores are renormalised each iteration. On the
  SNAP graphs this brings the hit ratio closer to the oracle's (`tests/bench/bench_tiering.py`
  compares them).
- `user`: a score array supplied by the user (`.npy`, one float per node, original ids).
- `none`: keep the source order (every node scores by its negated id).

All are vectorised torch: one `index_add_` over the edges per iteration, or one per column
range when the graph is on disk (`DiskCSC`); an undirected graph pulls instead (a gather and a
per-column sum, see `reverse_pagerank`; one native loop, `pull_sum_`, when the ops are built):
the same additions in the same order, so the scores are bit-identical either way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphtier.contract.errors import DatasetSourceError, GraphtierError
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.native_ops import resolve_backend

if TYPE_CHECKING:
    from graphtier.service.out_of_core.external_sort import DiskCSC

SCORE_KINDS = ("wrpr", "rpr", "degree", "user", "none")
ScoreKind = Literal["wrpr", "rpr", "degree", "user", "none"]


class ScoreSpec(BaseModel):
    """Which hotness score to compute and with what parameters (recorded in the manifest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: ScoreKind = Field("wrpr", description="score function, see the module docstring")
    iterations: int | None = Field(
        None, ge=1, le=1000, description="PageRank iterations; default 5 for wrpr (paper), 20 for rpr"
    )
    damping: float = Field(0.85, gt=0.0, lt=1.0, description="PageRank damping factor d")
    path: str | None = Field(None, description="`.npy` file with one score per node (kind=user)")
    fanout: int | None = Field(
        None, ge=1, description="wrpr/rpr: model a k-neighbour sample, min(1, k/d), instead of 1/d (None = paper)"
    )

    @model_validator(mode="after")
    def _check(self) -> ScoreSpec:
        if self.kind == "user" and not self.path:
            raise ValueError("kind 'user' needs a path to a .npy score array")
        if self.kind != "user" and self.path:
            raise ValueError(f"a score path only applies to kind 'user', not {self.kind!r}")
        if self.fanout is not None and self.kind not in ("wrpr", "rpr"):
            raise ValueError(f"a score fanout only applies to wrpr and rpr, not {self.kind!r}")
        return self

    @property
    def effective_iterations(self) -> int:
        if self.iterations is not None:
            return self.iterations
        return 5 if self.kind == "wrpr" else 20

    @classmethod
    def parse(
        cls, text: str, *, iterations: int | None = None, damping: float = 0.85, fanout: int | None = None
    ) -> ScoreSpec:
        """Parse the CLI form: `wrpr`, `rpr`, `degree`, `none` or `user:PATH.npy`."""
        if text.startswith("user:"):
            return cls(kind="user", path=text[len("user:") :], iterations=iterations, damping=damping)
        if text not in SCORE_KINDS or text == "user":
            raise GraphtierError(f"unknown score {text!r}: expected one of wrpr, rpr, degree, none, or user:PATH.npy")
        return cls(kind=text, iterations=iterations, damping=damping, fanout=fanout)

    def label(self) -> str:
        if self.kind in ("wrpr", "rpr"):
            fanout = f", fanout={self.fanout}" if self.fanout else ""
            return f"{self.kind}(iterations={self.effective_iterations}, damping={self.damping}{fanout})"
        return self.kind if self.kind != "user" else f"user({self.path})"


def reverse_pagerank(
    graph: CSCGraph | DiskCSC,
    *,
    iterations: int,
    damping: float,
    train_ids: torch.Tensor | None = None,
    fanout: int | None = None,
    symmetric: bool = False,
    accumulate: bool = False,
) -> torch.Tensor:
    """Algorithm 1; with `train_ids=None` it is plain reverse PageRank from a uniform start.

    `accumulate=True` returns the sum of the scores of every iteration (the start included)
    instead of the last one: the expected reads of a node over all hops of a sample, which a
    heterogeneous graph needs (see `service/prepared/hetero.py`: on a bipartite-like graph the last
    iteration's mass sits on one side only).

    `fanout=k` passes min(1, k/d) of a node's score to each in-neighbour instead of 1/d and
    renormalises the pulled mass each iteration (see the module docstring).

    `symmetric=True` (an undirected graph: u is in v's column exactly when v is in u's) pulls
    by column instead of pushing along edges: u's in-neighbours, in ascending order, are the
    columns that push to u, in the order the push adds them, so a gather and a sequential
    sum per column (`segment_reduce`) give the same bits as the scatter, without its random
    read-modify-writes over all N scores (which slow down once N x 8 bytes outgrow the cache).
    """
    n = graph.num_nodes
    score = torch.full((n,), 1.0 / n, dtype=torch.float64)
    if train_ids is not None and train_ids.numel() > 0:
        score[train_ids] *= n / train_ids.numel()
    in_degree = graph.in_degree().to(torch.float64)
    per_neighbour = 1.0 if fanout is None else float(fanout)
    pass_on = (per_neighbour / in_degree.clamp(min=1.0)).clamp(max=1.0)
    pass_on[in_degree == 0] = 0.0
    share = torch.empty(n, dtype=torch.float64)
    buffers = (
        torch.empty(n, dtype=torch.float64),
        torch.empty(n, dtype=torch.float64),
    )  # reused: N-sized, every iteration
    pull = _Pull(graph, symmetric)
    total = score.clone() if accumulate else None
    for i in range(iterations):
        torch.mul(score, pass_on, out=share)
        pulled = pull(share, buffers[i % 2])  # not the buffer `score` is, which `share` was read from
        if fanout is not None:
            pulled /= max(float(pulled.sum()), torch.finfo(torch.float64).tiny)
        score = pulled.mul_(damping).add_((1.0 - damping) / n)
        if total is not None:
            total += score
    return total if total is not None else score


class _Pull:
    """One iteration's pulled mass: `out[u]` = the sum of `share[v]` over the v whose column holds u,
    added in edge order (see `reverse_pagerank`)."""

    def __init__(self, graph: CSCGraph | DiskCSC, symmetric: bool) -> None:
        self.graph, self.symmetric = graph, symmetric
        self.in_degree = graph.in_degree()
        self.gathered = torch.empty(0, dtype=torch.float64)  # one column range's in-neighbour shares, reused
        # the native pull sums each column as it gathers it (same bits, no gathered array)
        self.native = symmetric and resolve_backend("auto", "PageRank pull") == "native"

    def __call__(self, share: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        colptr = self.graph.colptr
        if not self.symmetric:
            out.zero_()
        for v0, v1, row in self.graph.column_chunks():  # in edge order, so the sums add up in the same order
            if not self.symmetric:
                out.index_add_(0, row, share[v0:v1].repeat_interleave(self.in_degree[v0:v1], output_size=row.numel()))
                continue
            offsets = colptr[v0 : v1 + 1] - colptr[v0]
            if self.native:
                torch.ops.graphtier.pull_sum_(out[v0:v1], share, offsets, row)
                continue
            if self.gathered.numel() < row.numel():
                self.gathered = torch.empty(row.numel(), dtype=torch.float64)
            gathered = torch.index_select(share, 0, row, out=self.gathered[: row.numel()])
            out[v0:v1] = torch.segment_reduce(gathered, "sum", offsets=offsets, unsafe=True)
        return out


def _user_scores(path: str, num_nodes: int) -> torch.Tensor:
    """Scores in the source's node order (0..N-1, after a source remapped sparse ids in sorted order)."""
    file = Path(path)
    if not file.is_file():
        raise DatasetSourceError(file, "score file not found")
    try:
        values = np.load(file, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DatasetSourceError(file, f"not a readable .npy array ({exc})") from exc
    if values.ndim != 1 or values.shape[0] != num_nodes:
        raise DatasetSourceError(file, f"score array has shape {values.shape}, expected ({num_nodes},)")
    if not np.issubdtype(values.dtype, np.number) or not np.isfinite(values).all():
        raise DatasetSourceError(
            file, f"scores must be finite numbers, got dtype {values.dtype} with NaN/inf or non-numbers"
        )
    return torch.from_numpy(values.astype(np.float64))


def compute_scores(
    graph: CSCGraph | DiskCSC,
    spec: ScoreSpec,
    *,
    train_ids: torch.Tensor | None = None,
    symmetric: bool = False,
) -> torch.Tensor:
    """float64 score per node; higher means hotter. `symmetric`: the graph is undirected (its
    CSC holds every edge both ways), which lets PageRank pull instead of scatter, same bits."""
    if spec.kind == "degree":
        return graph.out_degree().to(torch.float64)
    if spec.kind == "rpr":
        return reverse_pagerank(
            graph, iterations=spec.effective_iterations, damping=spec.damping, fanout=spec.fanout, symmetric=symmetric
        )
    if spec.kind == "wrpr":
        if train_ids is None or train_ids.numel() == 0:
            raise GraphtierError("score 'wrpr' needs training ids; this dataset has no train split")
        return reverse_pagerank(
            graph,
            iterations=spec.effective_iterations,
            damping=spec.damping,
            train_ids=train_ids,
            fanout=spec.fanout,
            symmetric=symmetric,
        )
    if spec.kind == "user":
        return _user_scores(str(spec.path), graph.num_nodes)
    return -torch.arange(graph.num_nodes, dtype=torch.float64)
