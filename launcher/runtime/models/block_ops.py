"""Message passing over one sampled `Block`: degrees, weighted sums, per-destination softmax and
relational attention.

A block is a CSC bipartite graph: destination v's in-edges are `indices[indptr[v]:indptr[v+1]]`
(source local ids) and destinations are the first `num_dst` sources. Everything here produces
`num_dst` rows only, so a layer never computes rows the next layer does not read. All
operations are vectorised; the weighted sum runs as a sparse CSR x dense product (one pass
over the edges, no [num_edges, F] message tensor) with a hand-written backward. R-GAT's attention
(`relation_attention`) is its layer's torch forward; on the CPU the layer is one native op
(`native/cpu/rgat_conv.cpp`).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.service.sampling import Block


def destination_index(block: Block) -> Tensor:
    """int64 [num_edges]: the destination local id of every edge (CSC -> COO column)."""
    return torch.repeat_interleave(
        torch.arange(block.num_dst, dtype=torch.int64, device=block.indptr.device),
        block.indptr[1:] - block.indptr[:-1],
        output_size=block.num_edges,
    )


def in_degree(block: Block) -> Tensor:
    """int64 [num_dst]: sampled in-degree of each destination."""
    return block.indptr[1:] - block.indptr[:-1]


def out_degree(block: Block) -> Tensor:
    """int64 [num_src]: how many sampled edges leave each source."""
    return torch.bincount(block.indices, minlength=block.num_src)


def _csr(block: Block, weight: Tensor) -> Tensor:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(
            block.indptr, block.indices, weight, size=(block.num_dst, block.num_src), check_invariants=False
        )


class _WeightedSum(torch.autograd.Function):
    """out[v] = sum_e w[e] * x[indices[e]] over v's in-edges; gradient flows to x only."""

    @staticmethod
    def forward(ctx, x: Tensor, indptr: Tensor, indices: Tensor, weight: Tensor, num_dst: int) -> Tensor:
        block = Block(indptr=indptr, indices=indices, num_src=x.shape[0], num_dst=num_dst)
        ctx.save_for_backward(indptr, indices, weight)
        ctx.num_src = x.shape[0]
        if indices.numel() == 0:
            return x.new_zeros((num_dst, x.shape[1]))
        return _csr(block, weight.to(x.dtype)) @ x

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        indptr, indices, weight = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_out.new_zeros((ctx.num_src, grad_out.shape[1]))
            if indices.numel():
                block = Block(indptr=indptr, indices=indices, num_src=ctx.num_src, num_dst=grad_out.shape[0])
                msg = grad_out.index_select(0, destination_index(block)).mul_(weight.to(grad_out.dtype).unsqueeze(1))
                grad_x.index_add_(0, indices, msg)
        return grad_x, None, None, None, None


def weighted_sum(block: Block, x: Tensor, weight: Tensor) -> Tensor:
    """[num_dst, F]: each destination's sum of w_e * x[source_e] over its in-edges.

    `x` is [num_src, F]; `weight` is a constant [num_edges] tensor (degree normalisations).
    Use `attention_sum` when the edge weights themselves need gradients.
    """
    if x.dim() != 2 or x.shape[0] != block.num_src:
        raise GraphtierError(f"x must be [num_src={block.num_src}, F] for this block, got {tuple(x.shape)}")
    if weight.shape != (block.num_edges,):
        raise GraphtierError(f"edge weights must be [num_edges={block.num_edges}], got {tuple(weight.shape)}")
    return _WeightedSum.apply(x.contiguous(), block.indptr, block.indices, weight.detach(), block.num_dst)


def mean_aggregate(block: Block, x: Tensor) -> Tensor:
    """[num_dst, F]: mean of each destination's sampled in-neighbours (zeros when it has none)."""
    deg = in_degree(block)
    inv = 1.0 / deg.clamp(min=1).to(x.dtype)
    return weighted_sum(block, x, inv.repeat_interleave(deg, output_size=block.num_edges))


def segment_softmax(scores: Tensor, dst: Tensor, num_dst: int) -> Tensor:
    """Softmax of edge `scores` [E, H] over the edges sharing a destination (numerically stable)."""
    heads = scores.shape[1]
    index = dst.unsqueeze(1).expand(-1, heads)
    peak = scores.new_full((num_dst, heads), float("-inf"))
    peak = peak.scatter_reduce(0, index, scores.detach(), reduce="amax", include_self=True)
    exp = (scores - peak.index_select(0, dst)).exp()
    total = exp.new_zeros((num_dst, heads)).index_add_(0, dst, exp)
    return exp / total.index_select(0, dst).clamp(min=torch.finfo(exp.dtype).tiny)


def attention_sum(values: Tensor, src: Tensor, dst: Tensor, alpha: Tensor, num_dst: int) -> Tensor:
    """[num_dst, H, C]: sum over edges of alpha[e, h] * values[src[e], h, :], differentiable in both."""
    msg = values.index_select(0, src) * alpha.unsqueeze(-1)
    return values.new_zeros((num_dst, *values.shape[1:])).index_add_(0, dst, msg)


def relation_attention(
    block: Block,
    table: Tensor,
    edge_row: Tensor,
    relation: Tensor,
    att_src: Tensor,
    score_dst: Tensor,
    negative_slope: float,
) -> Tensor:
    """[num_dst, H, C]: R-GAT's attention-weighted sum of every relation's messages into each destination.

    Edge e (CSC order) carries the mapped source row `table[edge_row[e]]` ([H, C], through its relation's
    map) of relation `relation[e]`. Its score is LeakyReLU(`table[edge_row[e]] . att_src[relation[e]]` +
    `score_dst[v, relation[e]]`) per head, soft-maxed over the destination's in-edges of that relation
    only; the destination gets the sum of its edges' rows weighted by those. `table` [M, H, C],
    `att_src` [R, H, C] and `score_dst` [num_dst, R, H] get gradients; `edge_row` and `relation` are
    int64 [num_edges]. `RGATConv`'s torch forward: on the CPU the native layer does all of it in one call.
    """
    num_dst, heads = block.num_dst, table.shape[1]
    num_relations = att_src.shape[0]
    if score_dst.shape != (num_dst, num_relations, heads) or att_src.shape[1:] != table.shape[1:]:
        raise GraphtierError(
            f"relation_attention: score_dst {tuple(score_dst.shape)} and att_src {tuple(att_src.shape)} do not fit "
            f"{num_dst} destinations, {num_relations} relations and table rows {tuple(table.shape[1:])}"
        )
    dst = destination_index(block)
    mapped = table.index_select(0, edge_row)  # [E, H, C]
    score_src = (mapped * att_src.index_select(0, relation)).sum(-1)
    group = dst * num_relations + relation
    scores = F.leaky_relu(score_src + score_dst.reshape(-1, heads).index_select(0, group), negative_slope)
    alpha = segment_softmax(scores, group, num_dst * num_relations)
    return table.new_zeros((num_dst, *table.shape[1:])).index_add_(0, dst, mapped * alpha.unsqueeze(-1))
