"""CUDA tensor views of memory torch did not allocate (registered host pages, IPC mappings).

A tensor is made from an object exposing `__cuda_array_interface__` over the raw bytes and
then reinterpreted, so any dtype (bfloat16 too) works; the tensor holds the `owner` alive.
"""

from __future__ import annotations

import math
from typing import Any

import torch


class _RawDeviceBytes:
    def __init__(self, ptr: int, nbytes: int, owner: Any) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": None,
        }


def cuda_view(ptr: int, shape: tuple[int, ...], dtype: torch.dtype, device: int, owner: Any = None) -> torch.Tensor:
    """A CUDA tensor over `shape`/`dtype` elements at device address `ptr` (read-only by contract:
    torch's `__cuda_array_interface__` import takes no read-only flag)."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    with torch.cuda.device(device):
        raw = torch.as_tensor(_RawDeviceBytes(ptr, nbytes, owner), device=f"cuda:{device}")
    return raw.view(dtype).view(shape)
