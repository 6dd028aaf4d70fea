"""A last layer split at its weights (`last_input.py`): applying the layer's weights to the rows it reads
reproduces the layer's output, for every built-in conv it splits; anything else is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.runtime.last_input import last_input
from graphtier.launcher.runtime.layerwise import LayerChunk
from graphtier.launcher.runtime.layerwise_models import layer_steps
from graphtier.launcher.runtime.link_model import LinkModel
from graphtier.launcher.runtime.models import GATConv, GCNConv, SAGEConv, build_model
from graphtier.launcher.runtime.models.hgt import HGTConv
from graphtier.launcher.runtime.models.rgcn import RGCNConv
from graphtier.launcher.runtime.trained_model import TrainedModel
from graphtier.service.sampling import Block


def _block(num_src: int = 60, num_dst: int = 25, max_deg: int = 8, seed: int = 0) -> Block:
    """Distinct sources per destination (the destinations among them), some destinations with none."""
    g = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_deg + 1, (num_dst,), generator=g)
    deg[0] = 0
    order = torch.rand(num_dst, num_src, generator=g).argsort(dim=1)
    indices = order[torch.arange(num_src).unsqueeze(0) < deg.unsqueeze(1)]
    indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
    return Block(indptr=indptr, indices=indices, num_src=num_src, num_dst=num_dst)


def _randomise_biases(conv: nn.Module) -> None:
    """Trained biases are not zero: make every bias count."""
    with torch.no_grad():
        for name, parameter in conv.named_parameters():
            if name.endswith("bias"):
                parameter.normal_()


CONVS = {
    "sage": (lambda: SAGEConv(12, 5), 24),
    "gcn": (lambda: GCNConv(12, 5), 12),
    "gat": (lambda: GATConv(12, 5, heads=3, concat=False), 36),
    "rgcn": (lambda: RGCNConv(12, 5, num_relations=3), 48),
}


@pytest.mark.parametrize("kind", sorted(CONVS))
def test_the_layers_weights_over_the_rows_it_reads_give_its_output(kind):
    make, width = CONVS[kind]
    torch.manual_seed(1)
    conv = make().eval()
    _randomise_biases(conv)
    block = _block()
    x = torch.randn(block.num_src, 12)
    edge_types = torch.randint(0, 3, (block.num_edges,)) if kind == "rgcn" else None
    with torch.no_grad():
        expected = conv(block, edge_types, x) if kind == "rgcn" else conv(block, x)
        split = last_input(conv, kind)
        rows = split.rows(block, x, edge_types)
        logits = split.logits(rows)
    assert split.width == width and rows.shape == (block.num_dst, width)
    assert torch.allclose(logits, expected, atol=1e-5), (logits - expected).abs().max()
    if kind in ("sage", "rgcn"):  # the node's own row comes first
        assert torch.equal(rows[:, :12], x[: block.num_dst])


def test_a_last_layer_without_a_split_is_refused_by_name():
    with pytest.raises(GraphtierError, match="hgt: embeddings 'last-input' does not know .*HGTConv.*'hidden'"):
        last_input(HGTConv(8, num_types=2, num_relations=2, heads=2), "hgt")
    with pytest.raises(GraphtierError, match="gat: embeddings 'last-input' reads a GAT last layer that averages"):
        last_input(GATConv(8, 4, heads=2, concat=True), "gat")


def _trained(module: nn.Module, model: str) -> TrainedModel:
    spec = JobSpec(dataset="d", model=model)
    return TrainedModel(module.eval(), spec, None, 0, Path("w"), "0" * 64, None)  # type: ignore[arg-type]  # no config: layer_steps reads the module only


def test_layer_steps_of_last_input_end_in_the_split_and_its_weights():
    torch.manual_seed(0)
    trained = _trained(build_model("sage", 12, 16, 5, 2), "sage")
    steps = layer_steps(trained, "last-input")
    assert steps.widths == [16, 32] and steps.embedding_layer == 1
    block = _block()
    h = torch.randn(block.num_src, 16)
    chunk = LayerChunk(layer=1, index=0, nodes=torch.arange(block.num_src), block=block, x=h)
    with torch.no_grad():
        rows = steps.layer(chunk)
        assert torch.allclose(steps.logits(rows), trained.module.convs[1](block, h), atol=1e-5)
    assert layer_steps(trained).widths == [16, 5]  # hidden: the layers as they are


def test_a_link_model_is_refused_last_input_by_name():
    trained = _trained(LinkModel("sage", 12, 16, 2), "sage")
    with pytest.raises(GraphtierError, match="'last-input' is not supported for model sage: a link model's"):
        layer_steps(trained, "last-input")
