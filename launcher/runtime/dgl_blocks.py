"""graphtier's sampled blocks as DGL's: `to_dgl_blocks(batch.blocks)` gives `dgl.create_block`
blocks that `dgl.nn` layers (SAGEConv, GATConv, GraphConv, ...) consume unchanged.

A graphtier `Block` is DGL's message-flow graph in CSC form already: destinations are local ids
[0, num_dst), sources [0, num_src), the destinations also the first sources, `indptr` over the
destinations and `indices` their sources. The conversion hands DGL those arrays as its 'csc'
format without reordering (edge ids are the CSC positions), so it is cheap and exact.

dgl is imported when a conversion is asked for (it is an optional dependency: `pip install dgl`
where a wheel exists for the Python and torch at hand); this module imports nothing else of
graphtier, so it also runs in a separate DGL environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch


class CSCBlock(Protocol):
    """What a graphtier `Block` (graphtier.service.sampling.subgraph) offers the conversion."""

    indptr: torch.Tensor
    indices: torch.Tensor
    num_src: int
    num_dst: int


def _dgl() -> Any:
    try:
        import dgl
    except ImportError as exc:
        raise ImportError(
            f"graphtier.dgl needs DGL ({exc}); install a dgl wheel matching this Python and torch "
            "(dgl 2.1 for Python 3.11), or use the blocks as they are (indptr, indices)"
        ) from exc
    return dgl


def to_dgl_block(block: CSCBlock, device: torch.device | str | None = None) -> Any:
    """One graphtier block as a DGL block.

    Args:
        block: A graphtier `Block` (or anything with its `indptr`, `indices`, `num_src`, `num_dst`).
        device: Where the DGL block lives; None: the block's device.

    Returns:
        A `dgl.create_block` block with `block.num_src` source and `block.num_dst` destination
            nodes; its edge ids are the CSC positions.

    Raises:
        ImportError: dgl is not installed.
        ValueError: An `indptr` that does not fit `num_dst` and the edges.
    """
    dgl = _dgl()
    where = block.indptr.device if device is None else torch.device(device)
    indptr = block.indptr.to(where, torch.int64)
    indices = block.indices.to(where, torch.int64)
    if indptr.numel() != block.num_dst + 1 or int(indptr[-1]) != indices.numel():
        raise ValueError(
            f"a block's indptr must have num_dst + 1 = {block.num_dst + 1} entries ending at its "
            f"{indices.numel()} edges; got {indptr.numel()} entries ending at {int(indptr[-1])}"
        )
    edge_ids = torch.arange(indices.numel(), device=where)
    return dgl.create_block(
        {("_N", "_E", "_N"): ("csc", (indptr, indices, edge_ids))},
        num_src_nodes={"_N": block.num_src},
        num_dst_nodes={"_N": block.num_dst},
        device=where,
    )


def to_dgl_blocks(blocks: Sequence[CSCBlock], device: torch.device | str | None = None) -> list[Any]:
    """A batch's blocks as DGL blocks: `model(to_dgl_blocks(batch.blocks), batch.x)` for a DGL model
    written for DGL's DataLoader.

    Args:
        blocks: The blocks, input layer first, as `batch.blocks`.
        device: Where the DGL blocks live; None: each block's device.

    Returns:
        The DGL blocks in the same order.

    Raises:
        ImportError: dgl is not installed.
    """
    return [to_dgl_block(block, device) for block in blocks]
