"""graphtier's R-GAT layer against the reference, PyG's `HeteroConv` of one `GATConv` per relation
(`add_self_loops=False`, summed per destination type, as MLPerf's R-GAT builds it): the same typed
block, the same weights, the same output for every destination type (torch_geometric is in the test extra)."""

from __future__ import annotations

import pytest
import torch
from native_backends import BACKENDS
from typed_blocks import NODE_TYPES, RELATIONS, in_block_order, in_pyg_layout, typed_block

from graphtier.launcher.runtime.models.rgat import RGAT, RGATConv
from graphtier.service.sampling import Block

pyg_nn = pytest.importorskip(
    "torch_geometric.nn", reason="PyG's HeteroConv and GATConv are the reference: pip install -e '.[test]'"
)

DIM, HEADS = 16, 4


def _pair(node_types: list[str], relations: list[tuple[str, str, str]], out: int, concat: bool):
    """Ours and PyG's layer with ours's weights: per relation the linear map, both attention vectors, the bias."""
    relation_types = [(node_types.index(head), node_types.index(tail)) for head, _, tail in relations]
    ours = RGATConv(DIM, out, len(node_types), relation_types, heads=HEADS, concat=concat)
    ref = pyg_nn.HeteroConv(
        {
            relation: pyg_nn.GATConv(DIM, out, heads=HEADS, concat=concat, add_self_loops=False)
            for relation in relations
        },
        aggr="sum",
    )
    with torch.no_grad():
        ours.bias.uniform_(-1.0, 1.0)  # away from zero, so a bias added to the wrong rows shows
    _copy_weights(ours, ref, relations)
    return ours, ref


def _copy_weights(ours: RGATConv, ref, relations: list[tuple[str, str, str]]) -> None:
    """Ours's weights into PyG's `GATConv` of each relation: the linear map, both attention vectors, the bias."""
    with torch.no_grad():
        for r, relation in enumerate(relations):
            theirs = ref.convs[relation]
            theirs.lin.weight.copy_(ours.weight[r])
            theirs.att_src.copy_(ours.att_src[r : r + 1])
            theirs.att_dst.copy_(ours.att_dst[r : r + 1])
            theirs.bias.copy_(ours.bias[r])


def _reference_rows(ref, block: Block, rel, types, x, node_types, relations, width: int) -> torch.Tensor:
    """PyG's layer on the block in its layout, every relation handed over (empty ones too, as a
    sampler hands them), its output in block order; NaN on the types no relation reaches."""
    x_dict, edge_index_dict, position = in_pyg_layout(block, rel, types, x, node_types, relations, empty_relations=True)
    reference = ref(x_dict, edge_index_dict)
    assert set(reference) == {tail for _, _, tail in relations}  # PyG outputs only the types reached
    return in_block_order(reference, block, types, position, node_types, width)


@pytest.mark.filterwarnings("ignore:There exist node types")  # venue, on purpose
@pytest.mark.parametrize("backend", BACKENDS)  # the attention's native op and its torch fallback
@pytest.mark.parametrize(("seed", "concat"), [(0, True), (1, False), (2, True)])
def test_layer_matches_pyg_heteroconv_of_gatconv_for_every_destination_type(seed, concat, backend):
    torch.manual_seed(seed)
    block, rel, types = typed_block(seed)
    out = DIM // HEADS if concat else 3
    ours, ref = _pair(NODE_TYPES, RELATIONS, out, concat)
    ours.backend = backend
    x = torch.randn(block.num_src, DIM, requires_grad=True)

    width = out * HEADS if concat else out
    mine = ours(block, rel, types, x)
    expected = _reference_rows(ref, block, rel, types, x, NODE_TYPES, RELATIONS, width)
    assert mine.shape == (block.num_dst, width)

    venue = NODE_TYPES.index("venue")  # no relation's destination: PyG drops the type, the layer keeps zeros
    reached = (types[: block.num_dst] != venue).nonzero().squeeze(1)
    assert set(types[reached].tolist()) == {NODE_TYPES.index(tail) for _, _, tail in RELATIONS}
    torch.testing.assert_close(mine[reached], expected[reached], rtol=1e-5, atol=1e-5)
    assert not mine[types[: block.num_dst] == venue].any()

    # the same function: the same gradient reaches the inputs
    weights = torch.randn(reached.numel(), width)
    (ours_grad,) = torch.autograd.grad((mine[reached] * weights).sum(), x)
    (reference_grad,) = torch.autograd.grad((expected[reached] * weights).sum(), x)
    torch.testing.assert_close(ours_grad, reference_grad, rtol=1e-4, atol=1e-5)


def test_layer_matches_pyg_on_a_sampled_acm_batch(prepared_acm):
    """The same on the typed sampler's own output: both layers of an ACM batch (the sampler's relation
    ids, node types and destination-first order, relations without edges at a hop), the model's own
    layers, inputs from its `HeteroInput`; and the model's forward is those layers with LeakyReLU between."""
    from graphtier.launcher.runtime.hetero_batches import HeteroLocalBatches

    torch.manual_seed(0)
    schema = prepared_acm.manifest.hetero
    node_types = [info.name for info in schema.node_types]
    relations = [(r.head, r.name, r.tail) for r in schema.relations]
    model = RGAT(schema, DIM, 3, 2, heads=HEADS, dropout=0.0).eval()
    batch = next(HeteroLocalBatches(prepared_acm, ["5", "paper-has_subject-subject:5"], batch_size=16).epoch(0))
    ids, types = batch.input_nodes
    with torch.no_grad():
        for embedding in model.input.embed.values():  # featureless types' embeddings start at zero
            embedding.weight.normal_()
        x = model.input(ids, types, batch.x)
        for layer, (block, rel) in enumerate(zip(batch.blocks, batch.edge_types, strict=True)):
            conv = model.convs[layer]
            _, ref = _pair(node_types, relations, conv.out_dim, conv.concat)
            _copy_weights(conv, ref, relations)  # ref's weights from the model's own layer
            block_types = types[: block.num_src]
            out = conv(block, rel, block_types, x[: block.num_src])
            width = out.shape[1]
            expected = _reference_rows(ref, block, rel, block_types, x[: block.num_src], node_types, relations, width)
            torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)  # every type is some relation's tail
            x = torch.nn.functional.leaky_relu(out, 0.2) if layer == 0 else out
        logits = model(batch.blocks, batch.edge_types, ids, types, batch.x)
    assert logits.shape == (batch.blocks[-1].num_dst, 3)
    torch.testing.assert_close(logits, x)
