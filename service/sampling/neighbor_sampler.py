"""Uniform k-hop neighbour sampling without replacement, native (C++) or pure torch.

Hop semantics follow PyG's NeighborLoader (disjoint=False): hop 1 expands the seeds, hop i
expands only the nodes first discovered at hop i-1. A node with in-degree d keeps all its
in-neighbours when the fanout is -1 or d <= k, else k distinct ones chosen uniformly (Robert
Floyd's algorithm). Draws are counter-based (see counter_rng), so a given `seed` yields the
same sample on either backend and any thread count.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch

from graphtier.contract.errors import SamplingError
from graphtier.contract.fanouts import validate_fanouts
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.native_ops import Backend, resolve_backend
from graphtier.service.sampling.subgraph import SampledSubgraph
from graphtier.service.sampling.torch_sampler import sample_neighbors_torch


def _validate_graph(graph: CSCGraph) -> None:
    colptr, row = graph.colptr, graph.row
    for name, t in (("colptr", colptr), ("row", row)):
        if t.dtype != torch.int64 or t.dim() != 1 or t.device.type != "cpu":
            raise SamplingError(
                f"graph.{name} must be a 1-D int64 CPU tensor, got {t.dtype} {tuple(t.shape)} on {t.device}"
            )
    if colptr.numel() == 0 or int(colptr[0]) != 0 or int(colptr[-1]) != row.numel():
        raise SamplingError(
            f"graph.colptr must start at 0 and end at len(row)={row.numel()}, "
            f"got {colptr[:1].tolist()}..{colptr[-1:].tolist()}"
        )
    if colptr.numel() > 1 and bool((colptr[1:] < colptr[:-1]).any()):
        bad = int((colptr[1:] < colptr[:-1]).nonzero()[0])
        raise SamplingError(f"graph.colptr decreases at node {bad}: {int(colptr[bad])} -> {int(colptr[bad + 1])}")
    if row.numel():
        lo, hi = torch.aminmax(row)
        if int(lo) < 0 or int(hi) >= graph.num_nodes:
            raise SamplingError(f"graph.row holds ids in [{int(lo)}, {int(hi)}], outside [0, {graph.num_nodes})")


class NeighborSampler:
    """Samples k-hop subgraphs around seed nodes of one CSC graph.

    Holds a node map of N entries reused by every call, so one instance must not be used by
    two threads at once (use one sampler per producer).
    """

    def __init__(self, graph: CSCGraph, fanouts: Sequence[int], *, backend: Backend = "auto") -> None:
        self._fanouts = validate_fanouts(fanouts)
        _validate_graph(graph)
        self._graph = CSCGraph(colptr=graph.colptr.contiguous(), row=graph.row.contiguous())
        self._backend = resolve_backend(backend, "NeighborSampler")
        map_dtype = torch.int32 if graph.num_nodes < 2**31 - 1 else torch.int64
        self._node_map = torch.full((graph.num_nodes,), -1, dtype=map_dtype)

    @property
    def backend(self) -> str:
        """'native' or 'torch': the implementation this sampler runs."""
        return self._backend

    @property
    def fanouts(self) -> list[int]:
        return list(self._fanouts)

    @property
    def graph(self) -> CSCGraph:
        return self._graph

    def _check_seeds(self, seeds: torch.Tensor) -> torch.Tensor:
        if not isinstance(seeds, torch.Tensor):
            raise SamplingError(f"seeds must be a 1-D int64 tensor, got {type(seeds).__name__}")
        if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype.is_complex or seeds.dtype == torch.bool:
            raise SamplingError(f"seeds must be a 1-D integer tensor, got {seeds.dtype} of shape {tuple(seeds.shape)}")
        seeds = seeds.to(device="cpu", dtype=torch.int64).contiguous()
        if seeds.numel():
            lo, hi = torch.aminmax(seeds)
            if int(lo) < 0 or int(hi) >= self._graph.num_nodes:
                pos = int(((seeds < 0) | (seeds >= self._graph.num_nodes)).nonzero()[0])
                raise SamplingError(
                    f"seed {int(seeds[pos])} at position {pos} is out of range [0, {self._graph.num_nodes})"
                )
        return seeds

    @staticmethod
    def _check_unique(seeds: torch.Tensor) -> None:
        ordered = seeds.sort().values
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.numel():
            raise SamplingError(f"seed {int(repeated[0])} appears more than once; seeds must be unique")

    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph:
        """Sample around `seeds` (unique global ids) with randomness fixed by `seed` (any int, mod 2**64)."""
        seeds = self._check_seeds(seeds)
        try:
            word = operator.index(seed)
        except TypeError:
            raise SamplingError(f"seed must be an int, got {seed!r}") from None
        word &= (1 << 64) - 1
        signed = word - (1 << 64) if word >= 1 << 63 else word
        g = self._graph
        self._check_unique(
            seeds
        )  # here, not in the op: see native_ops (no error messages are formatted in native code)
        if self._backend == "native":
            out = torch.ops.graphtier.sample_neighbors(g.colptr, g.row, seeds, self._fanouts, signed, self._node_map)
        else:
            out = sample_neighbors_torch(g.colptr, g.row, seeds, self._fanouts, word, self._node_map)
        node_ids, indptr, indices, nodes_per_hop, edges_per_hop = out
        return SampledSubgraph(
            node_ids=node_ids,
            indptr=indptr,
            indices=indices,
            num_nodes_per_hop=nodes_per_hop.tolist(),
            num_edges_per_hop=edges_per_hop.tolist(),
        )
