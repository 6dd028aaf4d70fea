"""The row-wise Adam step every row-wise optimizer shares (`row_adam_step`): native and torch agree."""

from __future__ import annotations

import pytest
import torch
from native_backends import needs_native

from graphtier.launcher.runtime.row_adam import row_adam_step


@needs_native
@pytest.mark.parametrize("decay", [0.0, 0.05])
def test_the_native_row_step_gives_the_torch_steps_rows_moments_and_counts(decay):
    """`row_adam_step` native (one pass over the rows) and torch (its fallback): three steps over
    overlapping row sets leave the same table, moments and per-row counts; untouched rows stay put."""
    g = torch.Generator().manual_seed(5)
    start = torch.randn(40, 12, generator=g)
    batches = [torch.tensor([3, 7, 8, 20]), torch.tensor([7, 21, 39]), torch.tensor([0, 3, 7])]
    grads = [torch.randn(len(rows), 12, generator=g) for rows in batches]
    state = {}
    for backend in ("torch", "native"):
        weight, m, v = start.clone(), torch.zeros(40, 12), torch.zeros(40, 12)
        steps = torch.zeros(40, dtype=torch.int64)
        for rows, grad in zip(batches, grads, strict=True):
            row_adam_step(weight, m, v, steps, rows, grad, lr=0.01, weight_decay=decay, backend=backend)
        state[backend] = (weight, m, v, steps)
    for ours, reference in zip(state["native"], state["torch"], strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert state["native"][3].tolist().count(0) == 40 - 7  # seven distinct rows were touched
    untouched = state["native"][3] == 0
    assert torch.equal(state["native"][0][untouched], start[untouched])
