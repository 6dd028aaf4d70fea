"""Layers for a training script's own model.

    from graphtier.nn import Dropout   # in place of torch.nn.Dropout

`Dropout` gives `torch.nn.Dropout`'s result (same arguments, same `eval()` behaviour) with its
mask drawn by `torch.rand`: on the CPU, torch's own dropout draws one element at a time on one
thread, a large share of a GraphSAGE step's time. The built-in models use it.
"""

from __future__ import annotations

from graphtier.launcher.runtime.models.dropout import Dropout

__all__ = ["Dropout"]
