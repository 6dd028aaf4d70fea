"""Built-in models over sampled blocks: exact layer maths (against dense references and PyG),
only the rows the next layer needs, clear errors for mismatched inputs."""

from __future__ import annotations

import pytest
import torch
from native_backends import BACKENDS

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models import GATConv, GCNConv, SAGEConv, build_model
from graphtier.launcher.runtime.models.block_ops import mean_aggregate, segment_softmax, weighted_sum
from graphtier.service.graph.csc import build_csc
from graphtier.service.sampling import Block, NeighborSampler


def _random_block(num_src: int = 40, num_dst: int = 15, max_deg: int = 6, seed: int = 0) -> Block:
    """A block with distinct, non-self sources per destination, some destinations with none."""
    g = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_deg + 1, (num_dst,), generator=g)
    keys = torch.rand(num_dst, num_src, generator=g)
    keys[torch.arange(num_dst), torch.arange(num_dst)] = 2.0  # never pick v itself
    order = keys.argsort(dim=1)
    take = torch.arange(num_src).unsqueeze(0) < deg.unsqueeze(1)
    indices = order[take]
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    return Block(indptr=indptr, indices=indices, num_src=num_src, num_dst=num_dst)


def _dense(block: Block) -> torch.Tensor:
    a = torch.zeros(block.num_dst, block.num_src)
    src, dst = block.edge_index()
    a[dst, src] = 1.0
    return a


@pytest.mark.parametrize("dims", [(8, 4), (4, 16)], ids=["aggregate-first", "transform-first"])
def test_sage_layer_is_mean_of_neighbours_plus_root(dims):
    block, (i, o) = _random_block(), dims
    x = torch.randn(block.num_src, i)
    conv = SAGEConv(i, o)
    a = _dense(block)
    mean = a @ x / a.sum(1, keepdim=True).clamp(min=1)
    expected = mean @ conv.lin_neigh.weight.T + conv.lin_neigh.bias + x[: block.num_dst] @ conv.lin_root.weight.T
    torch.testing.assert_close(conv(block, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dims", [(8, 4), (4, 16)], ids=["aggregate-first", "transform-first"])
def test_gcn_layer_is_symmetric_normalisation_with_self_loops(dims):
    block, (i, o) = _random_block(), dims
    x = torch.randn(block.num_src, i)
    conv = GCNConv(i, o)
    a = _dense(block)
    a[torch.arange(block.num_dst), torch.arange(block.num_dst)] += 1
    norm = a / a.sum(1, keepdim=True).sqrt() / a.sum(0, keepdim=True).clamp(min=1).sqrt()
    torch.testing.assert_close(conv(block, x), norm @ x @ conv.lin.weight.T + conv.bias, rtol=1e-5, atol=1e-5)


def test_layers_match_pyg_convolutions():
    pyg = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")
    block = _random_block(seed=1)
    x = torch.randn(block.num_src, 8)
    ei, size = block.edge_index(), (block.num_src, block.num_dst)
    ours = SAGEConv(8, 6)
    ref = pyg.SAGEConv(8, 6)
    ref.lin_l.weight.data, ref.lin_l.bias.data = ours.lin_neigh.weight.data, ours.lin_neigh.bias.data
    ref.lin_r.weight.data = ours.lin_root.weight.data
    torch.testing.assert_close(ours(block, x), ref((x, x[: block.num_dst]), ei, size=size), rtol=1e-5, atol=1e-5)

    gat = GATConv(8, 5, heads=3, concat=True)
    ref = pyg.GATConv(8, 5, heads=3, concat=True, add_self_loops=False)
    ref.lin.weight.data, ref.bias.data = gat.lin.weight.data, gat.bias.data
    ref.att_src.data, ref.att_dst.data = gat.att_src.data, gat.att_dst.data
    loops = torch.arange(block.num_dst).repeat(2, 1)
    expected = ref((x, x[: block.num_dst]), torch.cat([ei, loops], 1), size=size)
    torch.testing.assert_close(gat(block, x), expected, rtol=1e-5, atol=1e-5)


def test_weighted_sum_gradient_matches_autograd_reference():
    block = _random_block(seed=2)
    x = torch.randn(block.num_src, 3, dtype=torch.float64, requires_grad=True)
    w = torch.rand(block.num_edges, dtype=torch.float64)
    torch.autograd.gradcheck(lambda t: weighted_sum(block, t, w), (x,))
    empty = Block(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), 5, 3)
    out = mean_aggregate(empty, x[:5])
    assert out.shape == (3, 3) and not out.any()


def test_segment_softmax_normalises_per_destination():
    dst = torch.tensor([0, 0, 2, 2, 2, 3])
    scores = torch.tensor([[1.0, 500.0], [2.0, 500.0], [0.0, -3.0], [0.0, 1.0], [0.0, 2.0], [7.0, 7.0]])
    alpha = segment_softmax(scores, dst, 4)
    sums = torch.zeros(4, 2).index_add_(0, dst, alpha)
    torch.testing.assert_close(sums[[0, 2, 3]], torch.ones(3, 2))
    assert torch.isfinite(alpha).all()
    torch.testing.assert_close(alpha[:2, 0], torch.softmax(torch.tensor([1.0, 2.0]), 0))


@pytest.mark.parametrize("name", ["sage", "gcn", "gat"])
def test_each_layer_computes_only_the_rows_the_next_layer_reads(name):
    g = torch.Generator().manual_seed(0)
    graph = build_csc(
        2000, torch.randint(0, 2000, (20000,), generator=g), torch.randint(0, 2000, (20000,), generator=g)
    )
    sample = NeighborSampler(graph, [8, 4, 2]).sample(torch.arange(0, 2000, 40), seed=1)
    blocks = sample.blocks()
    model = build_model(name, 12, 16, 5, 3, dropout=0.0, heads=4)
    rows = []
    for conv in model.convs:
        conv.register_forward_hook(lambda mod, args, out: rows.append((args[0].num_dst, out.shape[0])))
    out = model(blocks, torch.randn(sample.num_nodes, 12))
    assert out.shape == (50, 5)
    assert rows == [(b.num_dst, b.num_dst) for b in blocks]
    assert rows[0][1] < sample.num_nodes  # the input layer already skips the outermost hop's nodes


def test_mismatched_inputs_and_widths_are_refused():
    model = build_model("sage", 4, 8, 3, 2)
    block = _random_block(num_src=10, num_dst=4)
    with pytest.raises(GraphtierError, match="2 layers but got 1 blocks"):
        model([block], torch.randn(10, 4))
    with pytest.raises(GraphtierError, match=r"x must be \[num_src=10"):
        model([block, block], torch.randn(9, 4))
    with pytest.raises(GraphtierError, match="block 1 has 10 sources but block 0 has 4 destinations"):
        model([block, block], torch.randn(10, 4))
    with pytest.raises(GraphtierError, match="divisible by heads"):
        build_model("gat", 4, 10, 3, 2, heads=4)
    with pytest.raises(GraphtierError, match="unknown model 'gin'"):
        build_model("gin", 4, 8, 3, 2)  # type: ignore[arg-type]  # a name it refuses, on purpose
    with pytest.raises(GraphtierError, match="hidden must be an int >= 1"):
        build_model("gcn", 4, 0, 3, 2)


@pytest.mark.parametrize("draw", ["uniform", "bits"])
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_one_minus_p_scaled_and_passes_gradients_through_the_mask(p, draw):
    from graphtier.launcher.runtime.models.base import Dropout as BuiltinsDropout
    from graphtier.nn import Dropout  # the public path scripts use

    assert Dropout is BuiltinsDropout
    drop = Dropout(p, draw=draw)
    # the bits draw keeps 1 - p rounded to a multiple of 1/65536, and scales by that rate
    scale = 1 / (1 - p) if draw == "uniform" else 65536 / (65536 - round(p * 65536))
    x = torch.rand(400, 500) + 0.5  # no zeros of its own
    torch.manual_seed(0)
    y = drop(x.requires_grad_())
    kept = y != 0
    n = kept.numel()
    assert abs(kept.float().mean().item() - (1 - p)) < 5 * (p * (1 - p) / n) ** 0.5  # 5 standard errors
    torch.testing.assert_close(y[kept], x[kept] * scale)  # kept ones scaled as nn.Dropout scales them
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() * scale)
    torch.manual_seed(0)
    assert torch.equal(drop(x.detach()), y.detach())  # the mask comes from torch's generator: seeded runs repeat
    drop.eval()
    assert drop(x) is x  # evaluation: the identity, as nn.Dropout
    inplace = Dropout(p, inplace=True, draw=draw).train()  # the bits draw in place: its torch ops, the same mask
    z = x.detach().clone()
    torch.manual_seed(0)
    assert inplace(z) is z and torch.equal(z, y.detach())


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bits_dropout_gives_the_same_mask_native_and_torch(backend):
    """The bits draw's mask, native and torch, against its definition in Python integers: one key from
    torch's generator, word w = splitmix64(splitmix64(key) + w * GOLDEN), element i the (i // W)-th 16 bits
    of word i % W."""
    from graphtier.nn import Dropout
    from graphtier.service.sampling.counter_rng import GOLDEN, splitmix64_int

    drop = Dropout(0.3, draw="bits")
    drop.backend = backend
    x = torch.rand(37, 11) + 0.5  # 407 values: the last quarter one element short
    torch.manual_seed(4)
    y = drop(x)
    torch.manual_seed(4)
    key = splitmix64_int(int(torch.randint(0, 1 << 62, (1,), dtype=torch.int64)))
    words = [splitmix64_int((key + w * GOLDEN) % (1 << 64)) for w in range(102)]
    lanes = torch.tensor([(words[i % 102] >> (16 * (i // 102))) & 0xFFFF for i in range(407)])
    kept = (lanes >= round(0.3 * 65536)).view(37, 11)
    torch.testing.assert_close(y, torch.where(kept, x * (65536 / (65536 - round(0.3 * 65536))), 0.0))
    with pytest.raises(ValueError, match="draw must be"):
        Dropout(0.3, draw="bernoulli")
