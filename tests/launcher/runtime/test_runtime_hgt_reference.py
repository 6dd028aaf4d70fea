"""graphtier's HGT layer against the reference, PyG's `HGTConv`: the same typed block, the same
weights, the same output for every destination type (torch_geometric is in the test extra)."""

from __future__ import annotations

import pytest
import torch
from typed_blocks import NODE_TYPES, RELATIONS, in_block_order, in_pyg_layout, typed_block

from graphtier.launcher.runtime.models.hgt import HGTConv
from graphtier.service.sampling import Block

pyg_conv = pytest.importorskip(
    "torch_geometric.nn.conv", reason="PyG's HGTConv is the reference: pip install -e '.[test]' for torch_geometric"
)

DIM, HEADS = 16, 4


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
    """PyG's HGTConv on the block in its own layout (`in_pyg_layout`), its output put back in block
    order: [num_dst, dim], NaN on the rows of types PyG gives no output (no relation reaches them)."""
    relations = ref.edge_types
    x_dict, edge_index_dict, position = in_pyg_layout(block, rel, types, x, node_types, relations)
    reference = ref(x_dict, edge_index_dict)
    assert set(reference) == {tail for head, _, tail in relations}  # PyG outputs only the types reached
    return in_block_order(reference, block, types, position, node_types, ref.out_channels)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_layer_matches_pyg_hgtconv_for_every_destination_type(seed):
    torch.manual_seed(seed)
    block, rel, types = typed_block(seed)
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
    block, rel, types = typed_block(0)
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
