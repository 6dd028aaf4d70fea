"""The row-wise Adam step every row-wise optimizer shares (`row_adam_step`): native and torch agree."""

from __future__ import annotations

import pytest
import torch
from native_backends import BACKENDS, needs_native

from graphtier.launcher.runtime.row_adam import row_adam_step


@needs_native
@pytest.mark.parametrize("decay", [0.0, 0.05])
def test_the_native_row_step_gives_the_torch_steps_rows_moments_and_counts(decay):
    """`row_adam_step` native (one pass over the rows) and torch (its fallback): three steps over
    overlapping row sets leave the same table, moments and per-row counts; untouched rows stay put."""
    g = torch.Generator().manual_seed(5)
    start = torch.randn(40, 12, generator=g)
    batches = [torch.tensor([3, 7, 8, 20]), torch.tensor([21, 7, 39]), torch.tensor([7, 0, 3])]  # any order
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_repeated_row_gets_the_sum_of_its_gradients(backend):
    """Rows given twice (a batch that read a row twice, or several ranks' rows) step once, by the summed gradient."""
    g = torch.Generator().manual_seed(6)
    start = torch.randn(10, 4, generator=g)
    grad = torch.randn(5, 4, generator=g)
    repeated = torch.tensor([7, 2, 7, 9, 2])
    state = []
    for rows, rows_grad in (
        (repeated, grad),
        (torch.tensor([2, 7, 9]), torch.stack([grad[1] + grad[4], grad[0] + grad[2], grad[3]])),
    ):
        weight, m, v, steps = start.clone(), torch.zeros(10, 4), torch.zeros(10, 4), torch.zeros(10, dtype=torch.int64)
        assert row_adam_step(weight, m, v, steps, rows, rows_grad, lr=0.01, backend=backend) == 3
        state.append((weight, m, v, steps))
    for ours, reference in zip(*state, strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert state[0][3].tolist() == [0, 0, 1, 0, 0, 0, 0, 1, 0, 1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_gradient_changes_nothing_when_checked(backend, bad):
    weight, m, v, steps = torch.ones(6, 3), torch.zeros(6, 3), torch.zeros(6, 3), torch.zeros(6, dtype=torch.int64)
    grad = torch.ones(3, 3)
    grad[2, 1] = bad
    rows = torch.tensor([1, 4, 5])
    assert row_adam_step(weight, m, v, steps, rows, grad, lr=0.1, check_finite=True, backend=backend) is None
    assert torch.equal(weight, torch.ones(6, 3)) and not m.any() and not v.any() and not steps.any()
    assert row_adam_step(weight, m, v, steps, rows, grad, lr=0.1, backend=backend) == 3  # unchecked: it steps
    assert steps.tolist() == [0, 1, 0, 0, 1, 1]
