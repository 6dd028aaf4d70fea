"""Link-prediction mini-batches: seed edges, sampled negatives, and one sample around all endpoints.

A batch starts from B train edges (positives). K negatives per positive are drawn either
`uniform` (random node pairs) or `corrupt-tail` (the positive's source with a random tail),
seeded by the batch's sample seed, so a batch is the same whoever draws it. On a heterogeneous graph
the train edges are one target relation's, and negatives keep its types: heads of the head
type, tails of the tail type (`pair_end_types`); the sample is the heterogeneous sampler's. The endpoints of
every pair, deduplicated, are the seeds of one `NeighborSampler.sample` call (the native
sampler, over the union of endpoints), so the GNN computes each endpoint's embedding once;
`pairs` names each pair's endpoints by their local ids (< num_seeds), positives first.
"""

from __future__ import annotations

import dataclasses

import torch

from graphtier.contract.errors import SamplingError
from graphtier.contract.hetero import HeteroSchema, NodeTypeInfo
from graphtier.contract.link import NegativeSampling
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler, node_types_of
from graphtier.service.sampling.neighbor_sampler import NeighborSampler
from graphtier.service.sampling.subgraph import Block, SampledSubgraph

_MASK63 = (1 << 63) - 1
_NEGATIVE_STREAM = 0x4E47  # keeps the negatives' generator apart from the neighbour sampler's


def pair_end_types(schema: HeteroSchema, pairs: torch.Tensor) -> tuple[NodeTypeInfo, NodeTypeInfo]:
    """The node types of a heterogeneous graph's target-relation pairs (head first, global ids): every head
    of one type and every tail of one type, or SamplingError naming the types found."""
    if pairs.dim() != 2 or pairs.shape[1] != 2 or pairs.shape[0] == 0:
        raise SamplingError(f"pairs must be a non-empty [n, 2] tensor, got {tuple(pairs.shape)}")
    offsets = torch.tensor(schema.offsets(), dtype=torch.int64)
    ends = []
    for column, end in ((0, "heads"), (1, "tails")):
        found = torch.unique(node_types_of(pairs[:, column].to(torch.int64), offsets)).tolist()
        if len(found) != 1:
            names = [schema.node_types[t].name for t in found]
            raise SamplingError(
                f"the pairs' {end} are of types {names}: a heterogeneous edge split's are of one relation's"
            )
        ends.append(schema.node_types[found[0]])
    return ends[0], ends[1]


def max_link_seeds(batch_size: int, negatives: int, negative_sampling: NegativeSampling) -> int:
    """The most endpoints a batch of `batch_size` edges can have: the size of a slot's seed region."""
    per_edge = 2 + negatives if negative_sampling == "corrupt-tail" else 2 * (1 + negatives)
    return batch_size * per_edge


def max_link_pairs(batch_size: int, negatives: int) -> int:
    """Pairs of a full batch: each positive and its negatives."""
    return batch_size * (1 + negatives)


class LinkSampler:
    """`sample(edge_ids, seed)` -> the sample of those train edges, with its pairs; see the module docstring.

    Given a `HeteroNeighborSampler` the train pairs are a target relation's: negative heads are drawn
    from the head type's ids and tails from the tail type's, and the samples are heterogeneous.
    """

    def __init__(
        self,
        sampler: NeighborSampler | HeteroNeighborSampler,
        train_pairs: torch.Tensor,
        num_nodes: int,
        *,
        negatives: int,
        negative_sampling: NegativeSampling,
    ) -> None:
        if train_pairs.dim() != 2 or train_pairs.shape[1] != 2 or train_pairs.shape[0] == 0:
            raise SamplingError(f"train pairs must be a non-empty [n, 2] tensor, got {tuple(train_pairs.shape)}")
        if negatives < 1:
            raise SamplingError(f"negatives must be >= 1, got {negatives}")
        self.sampler, self.train_pairs, self.num_nodes = sampler, train_pairs, num_nodes
        self.negatives, self.negative_sampling = negatives, negative_sampling
        # [first, end) of the ids negative heads and tails are drawn from: every node, or the relation's types
        self.head_ids, self.tail_ids = (0, num_nodes), (0, num_nodes)
        if isinstance(sampler, HeteroNeighborSampler):
            head, tail = pair_end_types(sampler.schema, train_pairs)
            self.head_ids = (head.offset, head.offset + head.count)
            self.tail_ids = (tail.offset, tail.offset + tail.count)

    def negatives_for(self, positives: torch.Tensor, seed: int) -> torch.Tensor:
        """[B * K, 2] negative pairs for `positives` [B, 2], drawn with `seed`."""
        generator = torch.Generator().manual_seed((seed ^ _NEGATIVE_STREAM) & _MASK63)
        count = positives.shape[0] * self.negatives
        tails = torch.randint(*self.tail_ids, (count,), generator=generator)
        if self.negative_sampling == "corrupt-tail":
            heads = positives[:, 0].repeat_interleave(self.negatives)
        else:
            heads = torch.randint(*self.head_ids, (count,), generator=generator)
        return torch.stack([heads, tails], dim=1)

    def sample(self, edge_ids: torch.Tensor, *, seed: int) -> SampledSubgraph:
        """The batch of train edges `edge_ids`, its negatives and the sample around all their endpoints."""
        positives = self.train_pairs.index_select(0, edge_ids)
        pairs = torch.cat([positives, self.negatives_for(positives, seed)])
        endpoints, local = torch.unique(pairs.reshape(-1), return_inverse=True)
        sub = self.sampler.sample(endpoints, seed=seed)
        return dataclasses.replace(sub, pairs=local.view(-1, 2), num_positive=int(positives.shape[0]))


def drop_target_edges(blocks: list[Block], pairs: torch.Tensor, num_positive: int) -> list[Block]:
    """`blocks` without the edges between the endpoints of each positive pair (either direction).

    A training edge is an edge of the graph the sampler walks, so unless it is taken out the
    GNN computes u's embedding from v's and learns "these two are already linked", a signal no
    validation or test edge carries (they left the graph at prepare). Taking the target edges
    out of the batch's message passing, as SEAL, NCN and BUDDY do, trains on pairs as they are
    scored. `pairs` are seed local ids, the first `num_positive` rows positives.
    """
    if num_positive == 0 or not blocks:
        return blocks
    positives = pairs[:num_positive].to(blocks[0].indices.device)
    width = blocks[-1].num_src
    targets = torch.cat([positives[:, 0] * width + positives[:, 1], positives[:, 1] * width + positives[:, 0]])
    kept = []
    for block in blocks:
        degree = block.indptr[1:] - block.indptr[:-1]
        dst = torch.repeat_interleave(
            torch.arange(block.num_dst, device=degree.device), degree, output_size=block.num_edges
        )
        keep = ~torch.isin(block.indices * width + dst, targets)
        indptr = torch.zeros_like(block.indptr)
        indptr[1:] = torch.cumsum(torch.bincount(dst[keep], minlength=block.num_dst), 0)
        kept.append(Block(indptr=indptr, indices=block.indices[keep], num_src=block.num_src, num_dst=block.num_dst))
    return kept
