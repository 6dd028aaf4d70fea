"""The rank's view of torch.distributed: joined from torchrun's environment, or a single process.

torchrun exports RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; with them the
rank joins the process group (gloo on CPU, NCCL on CUDA) through `env://`. Without
WORLD_SIZE (or with WORLD_SIZE=1) it trains alone and collectives are no-ops. A group the
caller initialised already is used as is and left for the caller to destroy.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from graphtier.contract.errors import GraphtierError


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise GraphtierError(f"environment variable {name}={raw!r} is not an integer (torchrun sets it)") from None


@dataclass
class DistContext:
    """Rank, world size, device, and whether this object owns the process group."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool

    @classmethod
    def from_env(cls, device: str = "cpu", *, timeout_s: float = 600.0) -> DistContext:
        """Join torchrun's group when WORLD_SIZE > 1; `device` is 'cpu' or 'cuda' (cuda:LOCAL_RANK)."""
        if device not in ("cpu", "cuda"):
            raise GraphtierError(f"device must be 'cpu' or 'cuda', got {device!r}")
        local_rank = _env_int("LOCAL_RANK", 0)
        if device == "cuda":
            if not torch.cuda.is_available():
                raise GraphtierError("device='cuda' was asked for but torch sees no CUDA device; use device='cpu'")
            torch.cuda.set_device(local_rank)
            where = torch.device("cuda", local_rank)
        else:
            where = torch.device("cpu")
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), local_rank, where, owns_group=False)
        world_size = _env_int("WORLD_SIZE", 1)
        rank = _env_int("RANK", 0)
        if world_size <= 1:
            return cls(0, 1, local_rank, where, owns_group=False)
        if not 0 <= rank < world_size:
            raise GraphtierError(f"RANK={rank} is outside [0, WORLD_SIZE={world_size})")
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name):
                raise GraphtierError(f"WORLD_SIZE={world_size} but {name} is not set; launch the script with torchrun")
        backend = "nccl" if where.type == "cuda" else "gloo"
        timeout = dt.timedelta(seconds=timeout_s)
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            # torchrun's agent hosts the store and keeps it across restarts: keys from the failed
            # attempt (the dead ranks' gloo addresses) would be read back, so each attempt gets its own prefix.
            store = dist.TCPStore(
                os.environ["MASTER_ADDR"], _env_int("MASTER_PORT", 0), world_size, is_master=False, timeout=timeout
            )
            attempt = _env_int("TORCHELASTIC_RESTART_COUNT", 0)
            prefixed = dist.PrefixStore(f"graphtier/attempt_{attempt}/", store)
            dist.init_process_group(backend, store=prefixed, rank=rank, world_size=world_size, timeout=timeout)
        else:
            dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size, timeout=timeout)
        return cls(rank, world_size, local_rank, where, owns_group=True)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over all ranks in place (a no-op alone) and return it."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def shutdown(self) -> None:
        """Destroy the process group if this context created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def all_gather_rows(ids: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every rank's (ids, grad) -- row ids and one row each -- concatenated in rank order; this rank's alone
    when not distributed. A collective: every rank calls it, with however many rows (0 too)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return ids, grad
    world = dist.get_world_size()
    count = torch.tensor([ids.numel()], dtype=torch.int64, device=ids.device)
    counts = [torch.zeros_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    sizes = [int(c) for c in counts]
    longest = max(sizes)
    padded_ids = torch.zeros(longest, dtype=ids.dtype, device=ids.device)
    padded_ids[: ids.numel()] = ids
    padded_grad = torch.zeros(longest, grad.shape[1], dtype=grad.dtype, device=grad.device)
    padded_grad[: ids.numel()] = grad
    all_ids = [torch.empty_like(padded_ids) for _ in range(world)]
    all_grads = [torch.empty_like(padded_grad) for _ in range(world)]
    dist.all_gather(all_ids, padded_ids)
    dist.all_gather(all_grads, padded_grad)
    return (
        torch.cat([t[:n] for t, n in zip(all_ids, sizes, strict=True)]),
        torch.cat([t[:n] for t, n in zip(all_grads, sizes, strict=True)]),
    )
