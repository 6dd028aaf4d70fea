"""A typed block shaped like the typed sampler's output, for checking heterogeneous layers against
PyG's reference convolutions on the same input."""

from __future__ import annotations

import torch

from graphtier.service.sampling import Block

NODE_TYPES = ["author", "paper", "field", "venue"]  # venue only sends: it is no relation's destination
RELATIONS = [
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("paper", "written_by", "author"),
    ("paper", "has", "field"),
    ("field", "of", "paper"),
    ("venue", "publishes", "paper"),
]


def typed_block(seed: int) -> tuple[Block, torch.Tensor, torch.Tensor]:
    """A sampled-like block: 40 sources of mixed types, the first 15 its destinations, and per
    relation a random bipartite edge set from that relation's source type to its destination type
    (duplicates allowed). Destination 1, a paper, gets no edges, as a sampled node without
    neighbours. Returns the block, each edge's relation and each source's type."""
    g = torch.Generator().manual_seed(seed)
    num_src, num_dst, isolated = 40, 15, 1
    node_types = torch.randint(0, len(NODE_TYPES), (num_src,), generator=g)
    node_types[: 2 * len(NODE_TYPES)] = torch.arange(len(NODE_TYPES)).repeat(2)  # each type twice among them
    srcs, dsts, rels = [], [], []
    for r, (src_type, _, dst_type) in enumerate(RELATIONS):
        src_pool = (node_types == NODE_TYPES.index(src_type)).nonzero().squeeze(1)
        dst_pool = (node_types[:num_dst] == NODE_TYPES.index(dst_type)).nonzero().squeeze(1)
        dst_pool = dst_pool[dst_pool != isolated]
        count = 3 * dst_pool.numel()
        srcs.append(src_pool[torch.randint(0, src_pool.numel(), (count,), generator=g)])
        dsts.append(dst_pool[torch.randint(0, dst_pool.numel(), (count,), generator=g)])
        rels.append(torch.full((count,), r))
    src, dst, rel = torch.cat(srcs), torch.cat(dsts), torch.cat(rels)
    order = torch.sort(dst, stable=True).indices  # CSC: edges grouped by destination
    src, dst, rel = src[order], dst[order], rel[order]
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(torch.bincount(dst, minlength=num_dst), 0)
    return Block(indptr=indptr, indices=src, num_src=num_src, num_dst=num_dst), rel, node_types


def in_pyg_layout(
    block: Block,
    rel: torch.Tensor,
    types: torch.Tensor,
    x: torch.Tensor,
    node_types: list[str],
    relations: list[tuple[str, str, str]],
    *,
    empty_relations: bool = False,
) -> tuple[dict[str, torch.Tensor], dict[tuple[str, str, str], torch.Tensor], torch.Tensor]:
    """The block as PyG's heterogeneous layers take it: per type the source rows in block order
    (`x_dict`), per relation an edge_index over those per-type positions (relations without edges
    in the block left out unless `empty_relations`, as a sampler may hand them over), and each source's
    position among its type's rows."""
    position = torch.empty_like(types)
    x_dict = {}
    for t, name in enumerate(node_types):
        rows = (types == t).nonzero().squeeze(1)
        position[rows] = torch.arange(rows.numel())
        x_dict[name] = x[rows]
    edge_index = block.edge_index()
    for r, (head, _, tail) in enumerate(relations):  # the block's relation ids name the types its edges join
        src, dst = edge_index[:, rel == r]
        assert bool((types[src] == node_types.index(head)).all() and (types[dst] == node_types.index(tail)).all())
    edge_index_dict = {
        relation: position[edge_index[:, rel == r]]
        for r, relation in enumerate(relations)
        if empty_relations or (rel == r).any()
    }
    return x_dict, edge_index_dict, position


def in_block_order(
    reference: dict[str, torch.Tensor],
    block: Block,
    types: torch.Tensor,
    position: torch.Tensor,
    node_types: list[str],
    width: int,
) -> torch.Tensor:
    """A PyG layer's per-type output as the block's destination rows: [num_dst, width], NaN on the
    rows of the types it gave no output."""
    rows = torch.full((block.num_dst, width), float("nan"))
    dst_types = types[: block.num_dst]
    for t, name in enumerate(node_types):
        where = (dst_types == t).nonzero().squeeze(1)
        if name in reference:
            rows = rows.index_put((where,), reference[name][position[where]])
    return rows
