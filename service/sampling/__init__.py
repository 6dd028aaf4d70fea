"""Neighbour sampling: k-hop uniform sampling without replacement over a CSC graph.

`NeighborSampler(graph, fanouts).sample(seeds, seed=...)` returns a `SampledSubgraph` whose
per-layer `Block`s are zero-copy prefixes. Runs the C++ op when built (on up to
`torch.get_num_threads()` threads, helpers joining as they get a core, so it keeps its speed
beside busy trainers), else an identical pure-torch fallback. Fanouts are checked by
`graphtier.contract.fanouts`, the one rule every caller shares.
"""

from graphtier.service.sampling.neighbor_sampler import NeighborSampler
from graphtier.service.sampling.subgraph import Block, SampledSubgraph

__all__ = ["Block", "NeighborSampler", "SampledSubgraph"]
