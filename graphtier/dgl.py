"""DGL at its stable path: `graphtier.dgl.to_dgl_blocks(batch.blocks)` gives `dgl.create_block`
blocks for `dgl.nn` layers (needs dgl installed; the implementation and its documentation are
`graphtier.launcher.runtime.dgl_blocks`)."""

from __future__ import annotations

from graphtier.launcher.runtime.dgl_blocks import to_dgl_block, to_dgl_blocks

__all__ = ["to_dgl_block", "to_dgl_blocks"]
