"""What a rank does when a step's loss or gradients are NaN or infinite: the job's `on_nonfinite`.

- `fail` (the default): the rank stops with one line naming the rank, the step and what was not
  finite (the loss, or the first parameter whose gradient is), and the job fails with it.
- `skip-step`: the optimizer step is skipped -- every gradient is dropped just before it runs, so
  the weights, Adam's moments and its step count stay as they were -- the step is counted and
  logged, and training goes on. Gradients are checked after DDP's all-reduce, so every rank sees
  the same gradients and skips the same step. A run that only skips is broken, not unlucky: the
  rank fails after `MAX_CONSECUTIVE_SKIPS` skipped steps in a row, or at the end if it never took one.
- `off`: nothing is checked.

The gradient check is one fused norm over all gradients and one host sync per step.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

from graphtier.contract.errors import GraphtierError

OnNonFinite = Literal["fail", "skip-step", "off"]
MAX_CONSECUTIVE_SKIPS = 100
_LOGGED_SKIPS = 10  # the first skips each get a log line, then every 100th


class NonFiniteError(GraphtierError):
    """A step's loss or gradient was NaN or infinite (and `on_nonfinite` says to fail)."""


def _kind(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


class NonFiniteGuard:
    """Applies `policy` to one rank's steps; `attach` it to the optimizer, then `check_loss` every step."""

    def __init__(self, policy: OnNonFinite, rank: int, where: Callable[[], str]) -> None:
        self.policy, self.rank, self.where = policy, rank, where
        self.skipped = 0  # steps skipped in all
        self.in_a_row = 0  # steps skipped since the last one taken
        self.skipped_this_step = False
        self._names: dict[int, str] = {}

    def attach(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Check gradients just before every `optimizer.step()` (a no-op for `off`)."""
        self._names = {id(p): name for name, p in module.named_parameters()}
        if self.policy != "off":
            optimizer.register_step_pre_hook(self._before_step)

    def _before_step(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        self.skipped_this_step = False
        if not params:
            return
        norms = torch.stack(torch._foreach_norm([p.grad.detach() for p in params]))
        finite = torch.isfinite(norms)
        if bool(finite.all()):
            self.in_a_row = 0
            return
        index = int((~finite).nonzero()[0])
        name = self._names.get(id(params[index]), f"parameter {index}")
        what = f"the gradient of {name} is {_kind(float(norms[index]))}"
        if self.policy == "fail":
            raise NonFiniteError(
                f"rank {self.rank}: {what} at {self.where()}; training diverged or the data holds NaN/inf, so the job "
                "stops instead of reporting a result (on_nonfinite: fail; skip-step skips such steps)"
            )
        for p in params:
            p.grad = None  # the optimizer skips parameters without a gradient: nothing changes
        self._skip(what)

    def _skip(self, what: str) -> None:
        self.skipped_this_step = True
        self.skipped += 1
        self.in_a_row += 1
        if self.skipped <= _LOGGED_SKIPS or self.skipped % 100 == 0:
            print(
                f"rank {self.rank}: skipped the optimizer step at {self.where()}: {what} (on_nonfinite: skip-step; "
                f"{self.skipped} skipped so far)",
                file=sys.stderr,
                flush=True,
            )
        if self.in_a_row >= MAX_CONSECUTIVE_SKIPS:
            raise NonFiniteError(
                f"rank {self.rank}: {self.in_a_row} steps in a row had a non-finite loss or gradient, the latest at "
                f"{self.where()} ({what}); skip-step gives up after {MAX_CONSECUTIVE_SKIPS}: "
                "the data or the model is broken"
            )

    def check_loss(self, loss: float) -> bool:
        """After a step: True when its loss counts in the figures (False: a skipped step's loss)."""
        if self.policy == "off" or math.isfinite(loss):
            return not self.skipped_this_step
        if self.policy == "fail":
            raise NonFiniteError(
                f"rank {self.rank}: the loss is {loss} at {self.where()}; training diverged or the data holds NaN/inf, "
                "so the job stops instead of reporting a result (on_nonfinite: fail; skip-step skips such steps)"
            )
        if not self.skipped_this_step:  # the gradients were finite (or absent): the step ran, its loss is not kept
            self._skip(f"the loss is {loss}")
        return False

    def finish(self, steps: int) -> None:
        """At the end of training: a run whose every step was skipped fails; otherwise say how many were."""
        if self.policy != "skip-step" or not self.skipped:
            return
        if self.skipped >= steps:
            raise NonFiniteError(
                f"rank {self.rank}: all {steps} steps had a non-finite loss or gradient and were skipped "
                "(on_nonfinite: skip-step): the model never trained"
            )
        print(
            f"rank {self.rank}: {self.skipped} of {steps} steps skipped for a non-finite loss or gradient "
            "(on_nonfinite: skip-step)",
            file=sys.stderr,
            flush=True,
        )
