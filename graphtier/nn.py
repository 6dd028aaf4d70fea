"""Layers for a training script's own model at their stable path.

    from graphtier.nn import Dropout   # in place of torch.nn.Dropout

`Dropout` gives `torch.nn.Dropout`'s result (same arguments, same `eval()` behaviour) with its
mask drawn by `torch.rand`: on the CPU, torch's own dropout draws one element at a time on one
thread, which took a quarter of a GraphSAGE training step. The built-in models use it. The
implementation and its documentation are `graphtier.launcher.runtime.models.dropout`.
"""

from __future__ import annotations

from graphtier.launcher.runtime.models.dropout import Dropout

__all__ = ["Dropout"]
