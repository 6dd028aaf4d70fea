"""Run by torchrun (2 ranks, gloo) from test_embedding_optimizer.py: a featureless type's embedding
trained by its row-wise optimizer, each rank with its own batch rows.

argv: OUT. Each rank runs STEPS steps of a SparseEmbedding (row mode, outside any DDP) on the
ids `step_ids(step, rank)` with the loss `step_loss`, then writes its table to OUT/rank<r>.pt.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

from graphtier.launcher.runtime.embedding_optimizer import EmbeddingOptimizer
from graphtier.launcher.runtime.models.featureless import SparseEmbedding

NUM_NODES, WIDTH, STEPS, LR, DECAY = 50, 4, 4, 0.05, 0.2


def step_ids(step: int, rank: int) -> torch.Tensor:
    """The rows rank `rank` reads at `step` (the test recomputes them); some twice, some on both ranks."""
    generator = torch.Generator().manual_seed(10 * step + rank)
    return torch.randint(NUM_NODES // 2, (8,), generator=generator) + rank * 5


def step_loss(rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """A loss whose gradient differs per row and id: pulls row i towards i."""
    return ((rows - ids.unsqueeze(1).float() / NUM_NODES) ** 2).sum()


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    table = SparseEmbedding(NUM_NODES, WIDTH)
    optimizer = EmbeddingOptimizer([("table", table)], lr=LR, weight_decay=DECAY)
    for step in range(STEPS):
        ids = step_ids(step, rank)
        optimizer.zero_grad()
        step_loss(table(ids), ids).backward()
        assert table.weight.grad is not None and table.weight.grad.is_sparse
        optimizer.step()
    torch.save({"weight": table.weight.detach(), "steps": table.steps}, out / f"rank{rank}.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
