"""The built-in models as layer-wise steps: what layer l of a trained model computes for a chunk.

`layer_steps(trained)` turns a `TrainedModel` into `LayerSteps`: the width of every layer's rows,
the function computing a chunk's rows of layer l (`LayerChunk` in, [num_dst, width] out), which
layer's rows are the node embeddings (the last hidden layer; a link model's encoder output), and
the head turning the last layer's rows into logits where the model has one:

- `BlockGNN` (sage, gcn, gat): layer l is `convs[l]`, ReLU after all but the last; the last layer's
  rows are the logits, the embeddings the layer before (none for a one-layer model).
- `LinkModel`: its encoder's convs over input rows scaled to unit length (or over the learned rows
  of a featureless graph); the last layer's rows are the embeddings its decoder scores.
- R-GCN, R-GAT and HGT: layer 0 first turns every source into `hidden` columns (`HeteroInput`: a type's
  features through its linear map, or its learned embedding). R-GCN's and R-GAT's last layer gives the logits;
  HGT's convs keep `hidden` columns and its classifier (the head) maps them to logits. A heterogeneous link
  model's encoder output is its embeddings.

With embeddings `last-input` (`graphtier.contract.inference.EmbeddingKind`), a classifier's last layer
writes what its linear maps read (`last_input.py`) instead of its output, those rows are the embeddings,
and the logits are the layer's weights applied to them; HGT's embeddings are its classifier's input either
way. A link model or an R-GAT is refused: a decoder is no linear map, R-GAT's last layer has no split here.

Evaluation mode throughout: dropout is off, as it is when the train loop evaluates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.inference import DEFAULT_EMBEDDINGS, EmbeddingKind
from graphtier.launcher.runtime.hetero_link import HeteroLinkModel
from graphtier.launcher.runtime.last_input import LastInput, last_input
from graphtier.launcher.runtime.layerwise import LayerChunk
from graphtier.launcher.runtime.link_model import LinkModel
from graphtier.launcher.runtime.models.base import BlockGNN
from graphtier.launcher.runtime.models.hgt import HGT
from graphtier.launcher.runtime.models.rgat import RGAT
from graphtier.launcher.runtime.models.rgcn import RGCN
from graphtier.launcher.runtime.trained_model import TrainedModel


@dataclass(frozen=True)
class LayerSteps:
    """A model split into its layers (module docstring)."""

    widths: list[int]
    layer: Callable[[LayerChunk], Tensor]
    embedding_layer: int | None  # whose rows are the embeddings; None: the model has no hidden layer
    logits: Callable[[Tensor], Tensor] | None  # the last layer's rows -> logits; None: a link model (no classes)
    embedding_head: Callable[[Tensor], Tensor] | None = None  # embedding_layer's rows -> embeddings; None: as they are
    input_rows: Callable[[Tensor], Tensor] | None = None  # layer 0's rows of given nodes, replacing the features


def _identity(rows: Tensor) -> Tensor:
    return rows


def _width(conv: nn.Module, name: str) -> int:
    """A built-in conv's width attribute `name` (a plain int it keeps beside its parameters)."""
    value = getattr(conv, name)
    assert isinstance(value, int), f"{type(conv).__name__}.{name} is {value!r}"
    return value


def _out_width(conv: nn.Module) -> int:
    """The columns a built-in conv writes: GAT's hidden layers concatenate their heads."""
    heads = _width(conv, "heads") if getattr(conv, "concat", False) else 1
    return _width(conv, "out_dim") * heads


def _block_gnn(
    model: BlockGNN, transform: Callable[[Tensor], Tensor] | None, split: LastInput | None = None
) -> tuple[list[int], Callable]:
    """Widths and step of a `BlockGNN`; with `split`, the last layer writes what its weights read."""
    last = model.num_layers - 1

    def layer(chunk: LayerChunk) -> Tensor:
        x = chunk.x
        assert isinstance(x, Tensor)
        if chunk.layer == 0 and transform is not None:
            x = transform(x)
        if chunk.layer == last and split is not None:
            return split.rows(chunk.block, x, None)
        h = model.convs[chunk.layer](chunk.block, x)
        return model.activation(h) if chunk.layer < last else h

    widths = [_out_width(conv) for conv in model.convs]
    if split is not None:
        widths[last] = split.width
    return widths, layer


def _hetero(encoder: RGCN | RGAT | HGT, normalise: bool, split: LastInput | None = None) -> tuple[list[int], Callable]:
    """Widths and step of a heterogeneous model; with `split` (an R-GCN's), the last layer writes what its weights
    read."""
    last = encoder.num_layers - 1

    def layer(chunk: LayerChunk) -> Tensor:
        assert chunk.edge_types is not None and chunk.node_types is not None
        if chunk.layer == 0:
            features = chunk.x
            assert isinstance(features, dict)
            if normalise:  # as a heterogeneous link model scales its input rows
                features = {name: F.normalize(rows, dim=-1) for name, rows in features.items()}
            h = encoder.input(chunk.nodes, chunk.node_types, features)
        else:
            h = chunk.x
            assert isinstance(h, Tensor)
        conv = encoder.convs[chunk.layer]
        if chunk.layer == last and split is not None:
            return split.rows(chunk.block, h, chunk.edge_types)
        if isinstance(encoder, HGT):
            return conv(chunk.block, chunk.edge_types, chunk.node_types, h)
        if isinstance(encoder, RGAT):
            h = conv(chunk.block, chunk.edge_types, chunk.node_types, h)
            return encoder.activation(h) if chunk.layer < last else h
        h = conv(chunk.block, chunk.edge_types, h)
        return F.relu(h) if chunk.layer < last else h

    if isinstance(encoder, HGT):
        widths = [_width(conv, "dim") for conv in encoder.convs]
    else:
        widths = [_out_width(conv) for conv in encoder.convs]  # R-GAT's hidden layers concatenate their heads
    if split is not None:
        widths[last] = split.width
    return widths, layer


def _unit_rows(x: Tensor) -> Tensor:
    return F.normalize(x, dim=-1)


def _refuse_last_input(model: str, why: str) -> None:
    raise GraphtierError(f"embeddings 'last-input' is not supported for model {model}: {why}; use embeddings 'hidden'")


def layer_steps(trained: TrainedModel, embeddings: EmbeddingKind = DEFAULT_EMBEDDINGS) -> LayerSteps:
    """`trained`'s model as layer-wise steps, its embeddings of kind `embeddings` (module docstring)."""
    module = trained.module
    model = trained.spec.model
    if embeddings == "last-input":
        if isinstance(module, LinkModel | HeteroLinkModel):
            _refuse_last_input(model, "a link model's embeddings are already what its decoder (no linear map) reads")
        if isinstance(module, RGAT) and not isinstance(getattr(module, "classify", None), nn.Linear):
            _refuse_last_input(model, "its last layer sums one attention per relation, which has no split here")
        if isinstance(module, BlockGNN):
            split = last_input(module.convs[-1], model)
            widths, layer = _block_gnn(module, None, split)
            return LayerSteps(widths, layer, len(widths) - 1, split.logits)
        if isinstance(module, RGCN):
            split = last_input(module.convs[-1], model)
            widths, layer = _hetero(module, normalise=False, split=split)
            return LayerSteps(widths, layer, len(widths) - 1, split.logits)
        # HGT (or a model with a linear head): the head's input is its last layer, whose rows `hidden` writes
    if isinstance(module, LinkModel):
        encoder = module.encoder
        assert isinstance(encoder, BlockGNN)
        widths, layer = _block_gnn(encoder, _unit_rows)
        table = trained.embeddings
        learned = None
        if table is not None:  # a featureless graph: layer 0 reads its learned rows (scaled as training did)

            def learned(nodes: Tensor) -> Tensor:
                return table.index_select(0, nodes.cpu())

        return LayerSteps(widths, layer, len(widths) - 1, None, input_rows=learned)
    if isinstance(module, HeteroLinkModel):
        encoder = module.encoder
        assert isinstance(encoder, RGCN | RGAT | HGT)
        widths, layer = _hetero(encoder, normalise=True)
        head = encoder.classify if isinstance(encoder, HGT) else None  # HGT's classifier ends its encoder
        return LayerSteps(widths, layer, len(widths) - 1, None, embedding_head=head)
    if isinstance(module, BlockGNN):
        widths, layer = _block_gnn(module, None)
        return LayerSteps(widths, layer, len(widths) - 2 if len(widths) > 1 else None, _identity)
    if isinstance(module, HGT):
        widths, layer = _hetero(module, normalise=False)
        return LayerSteps(widths, layer, len(widths) - 1, module.classify)
    if isinstance(module, RGCN | RGAT):
        widths, layer = _hetero(module, normalise=False)
        return LayerSteps(widths, layer, len(widths) - 2 if len(widths) > 1 else None, _identity)
    raise GraphtierError(f"layer-wise inference does not know the layers of {type(module).__name__}")


@torch.no_grad()
def in_row_chunks(head: Callable[[Tensor], Tensor], rows: Tensor, device: torch.device, chunk: int = 65536) -> Tensor:
    """head(rows) on `device`, `chunk` rows at a time, back on the CPU as float32."""
    if head is _identity:
        return rows
    parts = [head(part.to(device)).to("cpu", torch.float32) for part in rows.split(chunk)]
    return torch.cat(parts) if parts else rows
