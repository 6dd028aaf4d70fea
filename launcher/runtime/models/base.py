"""`BlockGNN`: the layer-wise forward every built-in model shares.

`forward(blocks, x)` runs layer l on block l and hands its `num_dst` rows to layer l + 1,
whose sources they are; the last layer returns one row per seed. Dropout precedes every
layer and the activation follows every layer but the last.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.models.dropout import Dropout
from graphtier.service.sampling import Block


def check_blocks(blocks: Sequence[Block], x: Tensor, num_layers: int) -> None:
    """Raise GraphtierError unless `blocks` chain into each other and `x` feeds the first."""
    if len(blocks) != num_layers:
        raise GraphtierError(
            f"the model has {num_layers} layers but got {len(blocks)} blocks; sample with {num_layers} fanouts"
        )
    if x.dim() != 2 or x.shape[0] != blocks[0].num_src:
        raise GraphtierError(f"x must be [num_src={blocks[0].num_src}, F] for the first block, got {tuple(x.shape)}")
    for layer in range(1, num_layers):
        if blocks[layer].num_src != blocks[layer - 1].num_dst:
            raise GraphtierError(
                f"block {layer} has {blocks[layer].num_src} sources but block {layer - 1} has "
                f"{blocks[layer - 1].num_dst} destinations; blocks must come from one sample, input layer first"
            )


class BlockGNN(nn.Module):
    """A stack of block convolutions: layer(block, h) -> [block.num_dst, out] per layer."""

    def __init__(self, convs: Sequence[nn.Module], *, dropout: float, activation: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        if not 0.0 <= dropout < 1.0:
            raise GraphtierError(f"dropout must be in [0, 1), got {dropout}")
        self.convs = nn.ModuleList(convs)
        self.dropout = Dropout(dropout)
        self.activation = activation

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def forward(self, blocks: Sequence[Block], x: Tensor) -> Tensor:
        """Logits [num_seeds, out_dim] for the seeds of the sample the blocks came from."""
        check_blocks(blocks, x, self.num_layers)
        h = x
        for layer, (conv, block) in enumerate(zip(self.convs, blocks, strict=True)):
            h = conv(block, self.dropout(h))
            if layer < self.num_layers - 1:
                h = self.activation(h)
        return h


def dims(in_dim: int, hidden: int, out_dim: int, num_layers: int) -> list[tuple[int, int]]:
    """(in, out) widths of each layer, validated."""
    for name, value in (("in_dim", in_dim), ("hidden", hidden), ("out_dim", out_dim), ("num_layers", num_layers)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise GraphtierError(f"{name} must be an int >= 1, got {value!r}")
    widths = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
    return list(zip(widths[:-1], widths[1:], strict=True))


def aggregate_first(block: Block, in_dim: int, out_dim: int) -> bool:
    """Whether aggregating before the linear map is cheaper than transforming every source first.

    Both orders give the same result (the aggregation is linear); aggregate-first costs
    E*in + num_dst*in*out multiply-adds, transform-first num_src*in*out + E*out.
    """
    e = block.num_edges
    return e * in_dim + block.num_dst * in_dim * out_dim <= block.num_src * in_dim * out_dim + e * out_dim
