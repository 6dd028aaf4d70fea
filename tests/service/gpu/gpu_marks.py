"""Marks for the GPU tests: they run only where torch sees a CUDA device and the GPU ops are built;
elsewhere they skip with the reason (the CPU suite is unaffected)."""

from __future__ import annotations

import pytest
import torch


def cuda_skip_reason() -> str:
    if not torch.cuda.is_available():
        return "no CUDA device visible to torch (CPU build or no GPU)"
    try:
        from graphtier.service.gpu.gather import load_cuda_ops

        load_cuda_ops()
    except Exception as exc:  # any reason is a reason to skip, and is shown
        return str(exc)
    return ""


needs_cuda = pytest.mark.skipif(bool(cuda_skip_reason()), reason=cuda_skip_reason() or "ok")
