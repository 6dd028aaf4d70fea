"""Run by torchrun (2 ranks, gloo) from test_shared_embeddings.py: one learned embedding table per machine.

argv: OUT. Rank 0 alone writes row 7; both ranks read it. Then 3 steps of sparse updates, each
rank with gradients of its own rows; every rank saves its view of the table and the rows it
updated, and restores the table from that state. Then the same as if each rank were a machine
of its own (a table each). Each rank writes OUT/rank<r>.json and waits to be killed (the test
kills the whole tree).
"""

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from graphtier.launcher.runtime.link_model import NodeEmbeddings

NUM_NODES, WIDTH, SEED, STEPS = 64, 8, 3, 3


def step_rows(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The (ids, gradients) rank `rank` applies at `step`: the test recomputes them."""
    generator = torch.Generator().manual_seed(100 * step + rank)
    return torch.randint(NUM_NODES, (10,), generator=generator), torch.randn(10, WIDTH, generator=generator)


def main() -> None:
    out = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    table = NodeEmbeddings(NUM_NODES, WIDTH, lr=0.1, seed=SEED)
    if rank == 0:
        table.weight[7] = 42.0  # only rank 0 writes it
    dist.barrier()
    record = {"row7": table.weight[7].tolist(), "shared": table.shared, "updated": []}
    for step in range(STEPS):
        record["updated"].append(table.apply_gradients(*step_rows(step, rank)))
    torch.save(table.state_dict(), out / f"rank{rank}.pt")
    saved = {name: tensor.clone() for name, tensor in table.state_dict().items()}
    dist.barrier()
    if rank == 0:
        table.weight.zero_()  # lost, then restored from the checkpoint as a resumed job does
    dist.barrier()
    table.load_state_dict(saved)
    dist.barrier()
    record["restored"] = all(torch.equal(getattr(table, name), saved[name]) for name in saved)

    # the same ranks as two machines of one local rank each (a 2-node job): a table per machine, kept alike
    os.environ.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    per_machine = NodeEmbeddings(NUM_NODES, WIDTH, lr=0.1, seed=SEED)
    if rank == 0:
        per_machine.weight[7] = 42.0
    dist.barrier()
    record["machine_row7"] = per_machine.weight[7].tolist()
    if rank == 1:
        per_machine.weight[7] = 42.0  # as rank 0's machine has it: the copies start alike again
    for step in range(STEPS):
        per_machine.apply_gradients(*step_rows(step, rank))
    torch.save(per_machine.state_dict(), out / f"rank{rank}-machine.pt")
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    time.sleep(600)  # killed here: the table must not outlive its processes


if __name__ == "__main__":
    main()
