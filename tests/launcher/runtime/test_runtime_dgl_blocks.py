"""`graphtier.dgl`: a batch's blocks as `dgl.create_block` blocks that `dgl.nn` consumes, checked
against real DGL 2.1. DGL has no wheel for every Python and torch, so it runs where it is: in this
environment when dgl imports here, else in the separate DGL environment the reference benchmarks
set up (GRAPHTIER_DGL_PYTHON, default ../baseline-work/dgl-venv/bin/python beside the checkout),
fed blocks graphtier sampled here; skipped, saying so, when neither exists."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from graphtier.service.sampling import NeighborSampler

REPO = Path(__file__).resolve().parents[3]
ADAPTER = REPO / "launcher" / "runtime" / "dgl_blocks.py"
DGL_PYTHON = Path(os.environ.get("GRAPHTIER_DGL_PYTHON", REPO.parent / "baseline-work" / "dgl-venv" / "bin" / "python"))

# Runs under DGL's Python: converts the saved blocks with the adapter (loaded from its file: that
# environment has no graphtier installed), aggregates with DGL's message passing and SAGEConv.
CHECK = """
import importlib.util, sys, torch
import dgl, dgl.function as fn
from dgl.nn import SAGEConv
from types import SimpleNamespace
spec = importlib.util.spec_from_file_location("dgl_blocks", sys.argv[1])
adapter = importlib.util.module_from_spec(spec); spec.loader.exec_module(adapter)
saved = torch.load(sys.argv[2])
blocks = adapter.to_dgl_blocks([SimpleNamespace(**b) for b in saved["blocks"]])
out = {"num": [(b.num_src_nodes(), b.num_dst_nodes(), b.num_edges(), b.is_block) for b in blocks], "means": []}
h = saved["x"]
for block in blocks:
    block.srcdata["h"] = h
    block.update_all(fn.copy_u("h", "m"), fn.mean("m", "h"))
    h = block.dstdata["h"]
    out["means"].append(h)
torch.manual_seed(0)
out["sage"] = SAGEConv(saved["x"].shape[1], 8, "mean")(blocks[0], saved["x"]).shape
torch.save(out, sys.argv[3])
"""


def _sampled(small_rmat):
    sample = NeighborSampler(small_rmat.graph, [5, 3]).sample(small_rmat.split("train")[:32], seed=7)
    blocks = sample.blocks()
    x = small_rmat.features[sample.node_ids[: blocks[0].num_src]].float()
    return blocks, x


def _expected_means(blocks, x) -> list[torch.Tensor]:
    """Mean over each destination's sources, layer by layer, from the CSC arrays (what DGL must compute)."""
    means, h = [], x
    for block in blocks:
        rows = []
        for dst in range(block.num_dst):
            sources = block.indices[block.indptr[dst] : block.indptr[dst + 1]]
            rows.append(h[sources].mean(0) if sources.numel() else torch.zeros(h.shape[1]))
        h = torch.stack(rows)
        means.append(h)
    return means


def test_blocks_become_dgl_blocks_that_dgl_aggregates_as_graphtier_does(small_rmat, tmp_path):
    blocks, x = _sampled(small_rmat)
    expected = _expected_means(blocks, x)
    python = Path(sys.executable) if importlib.util.find_spec("dgl") is not None else DGL_PYTHON
    if not python.is_file():
        pytest.skip(
            f"no DGL to check against: dgl does not import here and {DGL_PYTHON} is missing (set "
            "GRAPHTIER_DGL_PYTHON to a Python with dgl 2.1, as the reference benchmarks' README sets one up)"
        )
    saved, result, script = tmp_path / "blocks.pt", tmp_path / "dgl.pt", tmp_path / "check.py"
    fields = ("indptr", "indices", "num_src", "num_dst")
    torch.save({"blocks": [{f: getattr(b, f) for f in fields} for b in blocks], "x": x}, saved)
    script.write_text(CHECK)
    done = subprocess.run(
        [str(python), str(script), str(ADAPTER), str(saved), str(result)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = torch.load(result, weights_only=False)
    assert out["num"] == [(b.num_src, b.num_dst, b.num_edges, True) for b in blocks]
    for got, want in zip(out["means"], expected, strict=True):
        torch.testing.assert_close(got, want)
    assert tuple(out["sage"]) == (blocks[0].num_dst, 8)


def test_without_dgl_the_adapter_says_what_to_install(small_rmat):
    if importlib.util.find_spec("dgl") is not None:
        pytest.skip("dgl is installed here")
    from graphtier.dgl import to_dgl_blocks

    blocks, _ = _sampled(small_rmat)
    with pytest.raises(ImportError, match="graphtier.dgl needs DGL"):
        to_dgl_blocks(blocks)
