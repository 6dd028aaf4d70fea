"""graphtier's HGT layer against the reference, PyG's `HGTConv`: the same typed block, the same
weights, the same output for every destination type (torch_geometric is in the test extra)."""

from __future__ import annotations

import pytest
import torch

from graphtier.launcher.runtime.models.hgt import HGTConv
from graphtier.service.sampling import Block

pyg_conv = pytest.importorskip(
    "torch_geometric.nn.conv", reason="PyG's HGTConv is the reference: pip install -e '.[test]' for torch_geometric"
)

NODE_TYPES = ["author", "paper", "field", "venue"]  # venue only sends: it is no relation's destination
RELATIONS = [
    ("paper", "cites", "paper"),
    ("author", "writes", "paper"),
    ("paper", "written_by", "author"),
    ("paper", "has", "field"),
    ("field", "of", "paper"),
    ("venue", "publishes", "paper"),
]
DIM, HEADS = 16, 4


def _typed_block(seed: int) -> tuple[Block, torch.Tensor, torch.Tensor]:
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


def _copy_weights(ours: HGTConv, ref, node_types: list[str], relations: list[tuple[str, str, str]]) -> None:
    """Ours into PyG's: per type the K/Q/V and output linears and the skip gate; per relation and
    head the attention and message matrices (PyG's `k_rel`/`v_rel` type head * R + r) and the prior."""
    num_relations, heads = len(relations), ours.heads
    with torch.no_grad():
        for t, name in enumerate(node_types):
            for mine, theirs in ((ours.kqv[t], ref.kqv_lin.lins[name]), (ours.out[t], ref.out_lin.lins[name])):
                theirs.weight.copy_(mine.weight)
                theirs.bias.copy_(mine.bias)
            ref.skip[name].copy_(ours.skip[t].reshape(1))
        for r, relation in enumerate(relations):
            for h in range(heads):
                ref.k_rel.weight[h * num_relations + r].copy_(ours.attention[r, h])
                ref.v_rel.weight[h * num_relations + r].copy_(ours.message[r, h])
            ref.p_rel["__".join(relation)].copy_(ours.prior[r].reshape(1, heads))


def _reference_rows(ref, block: Block, rel: torch.Tensor, types: torch.Tensor, x: torch.Tensor, node_types: list[str]):
    """PyG's HGTConv on the block in its own layout (per type the source rows in block order, per
    relation an edge_index over those per-type positions), its output put back in block order:
    [num_dst, dim], NaN on the rows of types PyG gives no output (no relation reaches them)."""
    relations = ref.edge_types
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
        relation: position[edge_index[:, rel == r]] for r, relation in enumerate(relations) if (rel == r).any()
    }
    reference = ref(x_dict, edge_index_dict)
    assert set(reference) == {tail for head, _, tail in relations}  # PyG outputs only the types reached
    rows = torch.full((block.num_dst, ref.out_channels), float("nan"))
    dst_types = types[: block.num_dst]
    for t, name in enumerate(node_types):
        where = (dst_types == t).nonzero().squeeze(1)
        if name in reference:
            rows = rows.index_put((where,), reference[name][position[where]])
    return rows


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layer_matches_pyg_hgtconv_for_every_destination_type(seed):
    torch.manual_seed(seed)
    block, rel, types = _typed_block(seed)
    ours = HGTConv(DIM, len(NODE_TYPES), len(RELATIONS), HEADS)
    with torch.no_grad():  # away from their initial ones, so a mixed-up prior or gate shows
        ours.prior.uniform_(0.5, 2.0)
        ours.skip.uniform_(-2.0, 2.0)
    ref = pyg_conv.HGTConv(DIM, DIM, (NODE_TYPES, RELATIONS), heads=HEADS)
    _copy_weights(ours, ref, NODE_TYPES, RELATIONS)
    x = torch.randn(block.num_src, DIM, requires_grad=True)

    out = ours(block, rel, types, x)
    expected = _reference_rows(ref, block, rel, types, x, NODE_TYPES)

    compared = (types[: block.num_dst] != NODE_TYPES.index("venue")).nonzero().squeeze(1)
    assert set(types[compared].tolist()) == {NODE_TYPES.index(tail) for _, _, tail in RELATIONS}
    torch.testing.assert_close(out[compared], expected[compared], rtol=1e-5, atol=1e-5)

    # the same function: the same gradient reaches the inputs
    weights = torch.randn(compared.numel(), DIM)
    (ours_grad,) = torch.autograd.grad((out[compared] * weights).sum(), x)
    (reference_grad,) = torch.autograd.grad((expected[compared] * weights).sum(), x)
    torch.testing.assert_close(ours_grad, reference_grad, rtol=1e-4, atol=1e-5)


def test_type_no_relation_reaches_keeps_its_gated_input():
    """Where PyG drops a type that receives no messages, the layer keeps it (a layer-wise model
    needs every destination row): its output is the gate's mix of the output bias and its input."""
    block, rel, types = _typed_block(0)
    ours = HGTConv(DIM, len(NODE_TYPES), len(RELATIONS), HEADS)
    x = torch.randn(block.num_src, DIM)
    venue = NODE_TYPES.index("venue")
    rows = (types[: block.num_dst] == venue).nonzero().squeeze(1)
    gate = torch.sigmoid(ours.skip[venue])
    expected = gate * ours.out[venue].bias + (1 - gate) * x[rows]
    torch.testing.assert_close(ours(block, rel, types, x)[rows], expected.detach())


def test_layer_matches_pyg_hgtconv_on_a_sampled_acm_block(prepared_acm):
    """The same on the typed sampler's own output: both layers of an ACM batch (the sampler's
    relation ids, node types and destination-first order), inputs from the model's `HeteroInput`."""
    from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches
    from graphtier.launcher.runtime.models.rgcn import HeteroInput

    torch.manual_seed(0)
    schema = prepared_acm.manifest.hetero
    node_types = [info.name for info in schema.node_types]
    relations = [(r.head, r.name, r.tail) for r in schema.relations]
    batch = next(HeteroLocalBatches(prepared_acm, ["5", "5"], batch_size=16).epoch(0))
    ids, types = batch.input_nodes
    with torch.no_grad():
        x = HeteroInput(schema, DIM)(ids, types, batch.x)
        x += torch.randn_like(x)  # featureless types' embeddings start at zero
        for block, rel in zip(batch.blocks, batch.edge_types, strict=True):
            ours = HGTConv(DIM, len(node_types), len(relations), HEADS)
            ours.prior.uniform_(0.5, 2.0)
            ours.skip.uniform_(-2.0, 2.0)
            ref = pyg_conv.HGTConv(DIM, DIM, (node_types, relations), heads=HEADS)
            _copy_weights(ours, ref, node_types, relations)
            block_types = types[: block.num_src]
            out = ours(block, rel, block_types, x[: block.num_src])
            expected = _reference_rows(ref, block, rel, block_types, x[: block.num_src], node_types)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)  # with the reverses every type is reached
            x = out
