"""DGL blocks from graphtier's: `to_dgl_blocks(batch.blocks)` gives `dgl.create_block` blocks for
`dgl.nn` layers (SAGEConv, GATConv, GraphConv, ...), unchanged.

A graphtier `Block` is DGL's message-flow graph in CSC form already, so the conversion hands DGL
the same arrays, without reordering. Needs dgl installed (it is imported on the first conversion).
"""

from __future__ import annotations

from graphtier.launcher.runtime.dgl_blocks import to_dgl_block, to_dgl_blocks

__all__ = ["to_dgl_block", "to_dgl_blocks"]
