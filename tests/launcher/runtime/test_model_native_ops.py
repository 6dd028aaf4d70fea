"""The models' native ops give their torch fallbacks' values and gradients: R-GAT's layer as one call
(`native/cpu/rgat_conv.cpp`) and the input map of mostly-zero feature rows (`SparseInputLinear`); and
R-GAT's layer, its parameters stacked over relations, starts and loads as one `GATConv` per relation did."""

from __future__ import annotations

import pytest
import torch
from native_backends import BACKENDS, needs_native
from typed_blocks import NODE_TYPES, typed_block
from typed_blocks import RELATIONS as TYPED_RELATIONS

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models.block_ops import relation_attention
from graphtier.launcher.runtime.models.gat import GATConv
from graphtier.launcher.runtime.models.rgat import RGATConv
from graphtier.launcher.runtime.models.rgcn import group_by_type
from graphtier.launcher.runtime.models.sparse_input import SparseInputLinear
from graphtier.service.sampling import Block

HEADS, CHANNELS, RELATIONS = 4, 8, 3  # the attention tests' shapes


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("seed", "concat"), [(0, True), (1, False), (2, True)])
def test_native_rgat_layer_gives_the_torch_layers_values_and_gradients(seed, concat, threads):
    """The layer as one native call and its backward (`native/cpu/rgat_conv.cpp`) against the layer's torch
    ops, on a typed block with a destination without in-edges and a type no relation reaches (venue)."""
    block, rel, types = typed_block(seed)
    relation_types = [(NODE_TYPES.index(head), NODE_TYPES.index(tail)) for head, _, tail in TYPED_RELATIONS]
    torch.manual_seed(seed)
    layer = RGATConv(16, 4 if concat else 3, len(NODE_TYPES), relation_types, heads=HEADS, concat=concat)
    with torch.no_grad():
        layer.bias.uniform_(-1.0, 1.0)
    x = torch.randn(block.num_src, 16, generator=torch.Generator().manual_seed(seed))
    upstream = torch.randn(block.num_dst, layer.bias.shape[1], generator=torch.Generator().manual_seed(seed + 10))
    results = {}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for backend in ("torch", "native"):
            layer.backend = backend
            layer.zero_grad(set_to_none=True)
            rows = x.clone().requires_grad_()
            out = layer(block, rel, types, rows)
            (out * upstream).sum().backward()
            results[backend] = (out.detach(), rows.grad, *(p.grad for p in layer.parameters()))
    finally:
        torch.set_num_threads(before)
    assert results["native"][0][1].abs().sum() > 0  # no in-edges, yet the biases of the relations ending there
    for ours, reference in zip(results["native"], results["torch"], strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-4, atol=1e-5)


@needs_native
def test_native_rgat_layer_refuses_an_edge_between_types_its_relation_does_not_join():
    block, rel, types = typed_block(0)
    relation_types = [(NODE_TYPES.index(head), NODE_TYPES.index(tail)) for head, _, tail in TYPED_RELATIONS]
    layer = RGATConv(16, 4, len(NODE_TYPES), relation_types, heads=HEADS, concat=True)
    wrong = rel.clone()
    wrong[0] = (rel[0] + 1) % len(TYPED_RELATIONS)  # its ends are not that relation's types
    with pytest.raises(RuntimeError, match="joins node types .* not the relation"):
        layer(block, wrong, types, torch.randn(block.num_src, 16))


def _attention_inputs(seed: int):
    """A block of 30 destinations with skewed in-degrees (some none, some of one relation only), a
    table of mapped rows, every edge's row and relation, and the attention's parameters."""
    g = torch.Generator().manual_seed(seed)
    num_dst, rows = 30, 50
    degree = (torch.rand(num_dst, generator=g) ** 3 * 25).long()
    degree[:3] = 0  # destinations without in-edges get zero rows
    edges = int(degree.sum())
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(degree, 0)])
    relation = torch.randint(0, RELATIONS, (edges,), generator=g)
    relation[indptr[5] : indptr[6]] = 1  # one destination reached by a single relation
    block = Block(indptr=indptr, indices=torch.randint(0, rows, (edges,), generator=g), num_src=rows, num_dst=num_dst)
    edge_row = torch.randint(0, rows, (edges,), generator=g)
    table = torch.randn(rows, HEADS, CHANNELS, generator=g, requires_grad=True)
    att_src = torch.randn(RELATIONS, HEADS, CHANNELS, generator=g, requires_grad=True)
    score_dst = torch.randn(num_dst, RELATIONS, HEADS, generator=g, requires_grad=True)
    return block, table, edge_row, relation, att_src, score_dst


def test_relation_attention_refuses_parameters_that_do_not_fit_the_block():
    block, table, edge_row, relation, att_src, score_dst = _attention_inputs(0)
    with pytest.raises(GraphtierError, match="score_dst"):
        relation_attention(block, table, edge_row, relation, att_src, score_dst[:-1], 0.2)
    with pytest.raises(GraphtierError, match="att_src"):
        relation_attention(block, table, edge_row, relation, att_src[:, :, :-1], score_dst, 0.2)


def _feature_rows(seed: int, rows: int = 70, columns: int = 301) -> torch.Tensor:
    """Bag-of-words-like rows (~5% non-zero; 301 columns: not a multiple of the kernel's groups), one
    row all zeros, one dense, one holding a -0.0."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(rows, columns, generator=g) < 0.05).float() * torch.rand(rows, columns, generator=g)
    x[3] = 0.0
    x[4] = torch.randn(columns, generator=g)
    x[5, 7] = -0.0
    return x


@needs_native
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("rows", [70, 1100])  # fewer rows than a thread's share, and several shares
def test_sparse_input_linear_gives_the_dense_products_values_and_gradients(threads, rows):
    x = _feature_rows(0, rows=rows)
    upstream = torch.randn(x.shape[0], 24, generator=torch.Generator().manual_seed(1))
    results = {}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for backend in ("torch", "native"):
            torch.manual_seed(0)
            layer = SparseInputLinear(x.shape[1], 24)
            layer.backend = backend
            out = layer(x)
            (out * upstream).sum().backward()
            results[backend] = (out.detach(), layer.weight.grad, layer.bias.grad)
    finally:
        torch.set_num_threads(before)
    for ours, reference in zip(results["native"], results["torch"], strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)


@needs_native
def test_sparse_input_linear_takes_the_kernel_only_for_sparse_rows_that_need_no_gradient():
    layer = SparseInputLinear(301, 16)
    sparse = _feature_rows(1)
    assert layer._sparse_rows(sparse) is not None
    assert layer._sparse_rows(torch.randn(70, 301)) is None  # dense rows: the product is faster
    assert (
        layer._sparse_rows(sparse.clone().requires_grad_()) is None
    )  # rows that need a gradient: the product's backward
    assert layer._sparse_rows(sparse.double()) is None
    with_grad = sparse.clone().requires_grad_()
    (grad,) = torch.autograd.grad(layer(with_grad).sum(), with_grad)
    torch.testing.assert_close(grad, layer.weight.sum(0).expand_as(sparse))
    assert list(dict(layer.state_dict())) == ["weight", "bias"]  # nn.Linear's names: checkpoints unchanged
    poisoned = sparse.clone()
    poisoned[6, 11] = float("nan")  # a NaN feature reaches its row's outputs, as through the dense product
    with torch.no_grad():
        out = layer(poisoned)
    assert layer._sparse_rows(poisoned) is not None and torch.isnan(out[6]).all() and not torch.isnan(out[7]).any()


def test_rgat_layer_draws_gatconvs_initial_weights_and_loads_their_checkpoints():
    """The stacked layer starts from the weights one `GATConv` per relation draws from the same seed, and a
    state dict written in that per-relation layout (`convs.{r}.lin.weight`, ...) loads into it unchanged."""
    relation_types = [(0, 1), (1, 0), (0, 0)]
    torch.manual_seed(3)
    per_relation = [GATConv(16, 4, heads=2, concat=True) for _ in relation_types]
    torch.manual_seed(3)
    layer = RGATConv(16, 4, 2, relation_types, heads=2, concat=True)
    for r, conv in enumerate(per_relation):
        torch.testing.assert_close(layer.weight[r], conv.lin.weight, rtol=0, atol=0)
        torch.testing.assert_close(layer.att_src[r : r + 1], conv.att_src, rtol=0, atol=0)
        torch.testing.assert_close(layer.att_dst[r : r + 1], conv.att_dst, rtol=0, atol=0)
        with torch.no_grad():
            conv.bias.uniform_(-1.0, 1.0)
    legacy = {
        f"convs.{r}.{name}": value for r, conv in enumerate(per_relation) for name, value in conv.state_dict().items()
    }
    fresh = RGATConv(16, 4, 2, relation_types, heads=2, concat=True)
    fresh.load_state_dict(legacy)
    for r, conv in enumerate(per_relation):
        torch.testing.assert_close(fresh.bias[r], conv.bias, rtol=0, atol=0)
        torch.testing.assert_close(fresh.weight[r], conv.lin.weight, rtol=0, atol=0)
    assert set(fresh.state_dict()) == {"weight", "att_src", "att_dst", "bias"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_by_type_groups_stably_and_refuses_an_id_outside_its_type(backend):
    """The input layer's grouping (`rgcn.group_by_type`), native and torch: each type's nodes in their order,
    the inverse permutation, type-local ids and counts; an id outside its type's range is refused."""
    offsets = torch.tensor([0, 10, 15, 40])  # three types: ids 0-9, 10-14, 15-39
    node_ids = torch.tensor([12, 3, 20, 11, 0, 39, 7])
    node_types = torch.tensor([1, 0, 2, 1, 0, 2, 0])
    order, inverse, local, counts = group_by_type(node_ids, node_types, offsets, backend=backend)
    assert order.tolist() == [1, 4, 6, 0, 3, 2, 5]
    assert torch.equal(order[inverse], torch.arange(7))
    assert local.tolist() == [3, 0, 7, 2, 1, 5, 24]
    assert counts.tolist() == [3, 2, 2]
    with pytest.raises((RuntimeError, GraphtierError), match="id range of its type"):
        group_by_type(node_ids, torch.tensor([1, 0, 2, 1, 0, 2, 1]), offsets, backend=backend)  # 7 is no type-1 id
