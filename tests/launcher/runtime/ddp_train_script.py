"""A torchrun rank for the runtime tests: trains GraphSAGE with LocalBatchSource and records
what it saw. Usage: torchrun ... ddp_train_script.py ROOT DATASET OUT_DIR EPOCHS CKPT_EVERY.

With GRAPHTIER_TEST_DIE_AT=<epoch>:<batch>, rank 1 of the first attempt (torchrun restart
count 0) exits abruptly when about to train on that batch, as a killed rank would.
With GRAPHTIER_TEST_UNEVEN=1, rank 1 drops its last batch of every epoch (uneven inputs).
With GRAPHTIER_TEST_OWN_CHECKPOINTS=1, rank 1 reads checkpoints from a directory of its own, where
nobody writes (as a node whose part is new after a multi-node restart): it must resume from rank 0's.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from graphtier.contract.processes import exit_without_teardown
from graphtier.launcher.runtime import LocalBatchSource, TrainConfig, run_training
from graphtier.service.prepared import PreparedDataset


def main() -> None:
    root, name, out, epochs, ckpt_every = sys.argv[1:6]
    out = Path(out)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    die_at = os.environ.get("GRAPHTIER_TEST_DIE_AT")
    uneven = os.environ.get("GRAPHTIER_TEST_UNEVEN") == "1" and rank == 1
    own_checkpoints = os.environ.get("GRAPHTIER_TEST_OWN_CHECKPOINTS") == "1"
    source = LocalBatchSource(PreparedDataset.open(name, Path(root)), [10, 5], 32, rank, world, seed=3)
    seen: dict[int, list[int]] = {}

    def batches(epoch: int):
        for index, batch in enumerate(source.epoch_batches(epoch)):
            if die_at and rank == 1 and attempt == 0 and f"{epoch}:{index}" == die_at:
                os._exit(17)
            if uneven and index == source.num_train_batches() - 1:
                batch.release()
                return
            seen.setdefault(epoch, []).extend(batch.seeds.tolist())
            yield batch

    config = TrainConfig(
        model="sage",
        in_dim=source.feature_dim,
        num_classes=source.num_classes,
        hidden=32,
        layers=2,
        lr=0.01,
        dropout=0.2,
        epochs=int(epochs),
        seed=5,
        checkpoint_dir=out / ("ckpt" if rank == 0 or not own_checkpoints else f"ckpt-rank{rank}"),
        checkpoint_every_steps=int(ckpt_every),
        eval_every_epochs=0,
    )
    result = run_training(batches, source.eval_batches, config)
    torch.save(result.model.state_dict(), out / f"rank{rank}.pt")
    record = {
        "rank": rank,
        "world_size": world,
        "attempt": attempt,
        "steps": result.steps,
        "seen": {str(e): ids for e, ids in seen.items()},
        "resumed_step": result.resumed_position.step if result.resumed_position else None,
        "resumed_epoch": result.resumed_position.epoch if result.resumed_position else None,
        "resumed_batch": result.resumed_position.batch if result.resumed_position else None,
        "final_eval": result.final_eval,
        "batches_per_epoch": source.num_train_batches(),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main()
    # as a built-in rank ends (launcher/rank_main.py): its group destroyed and its files written, the
    # interpreter's teardown of torch's and gloo's threads is skipped; run through it, a rank
    # sometimes aborted there ("terminate called without an active exception") after its work was done
    exit_without_teardown(0)
