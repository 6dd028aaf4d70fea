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
    torch's `__cuda_array_interface__` import takes no read-only flag). CudaError when torch would
    give a copy instead (`require_view`)."""
    nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
    with torch.cuda.device(device):
        raw = torch.as_tensor(_RawDeviceBytes(ptr, nbytes, owner), device=f"cuda:{device}")
    return require_view(raw, ptr, device).view(dtype).view(shape)


def require_view(tensor: torch.Tensor, ptr: int, device: int) -> torch.Tensor:
    """`tensor` itself when it is the bytes at `ptr` on GPU `device`; else CudaError. torch places an
    imported pointer on the device the driver reports for it (where the memory was registered, or
    where it lives) and, asked for another device, silently copies it there: a gather would then
    read, or a producer write, a private copy instead of the shared memory."""
    if tensor.data_ptr() != ptr or tensor.device != torch.device("cuda", device):
        from graphtier.service.gpu.runtime import CudaError

        raise CudaError(
            f"the memory at {ptr:#x} is not viewable in place on GPU {device}: torch made a copy on "
            f"{tensor.device} at {tensor.data_ptr():#x} (the memory was registered for, or lives on, another GPU)"
        )
    return tensor
