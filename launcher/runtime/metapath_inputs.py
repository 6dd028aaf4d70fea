"""`MetapathInputs`: a preagg job's metapath features, computed once and read by every rank.

The pre-aggregated model reads, for each seed, its row of the target type's metapath features
(`graphtier.service.graph.metapath_features`: neighbour means along every metapath of up to
`len(fanouts)` hops, and the propagated training labels). They are computed from the job's copy of
the dataset -- its CSC, `edge_type`, labels, train split and each featured type's rows read through
its tiers -- by each node's first rank, and cached in the job's directory
(`metapath-features/hops-<k>.pt`, with the dataset version, hops, classes and a digest of the train
ids it was computed for); the node's other ranks, and a rank restarted by torchrun, load it.

The job's batches still come from its producers (the train loop's epochs, shards and steps are
those of every job); the model reads only their seeds' ids (`forward`), so `--fanout 1,1` samples
least and gives the same result as any other fanout of as many hops.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.service.graph.metapath_features import FeatureBlock, MetapathFeatures, compute_metapath_features
from graphtier.service.pipeline.batch import Batch
from graphtier.service.store import AttachedDataset

METAPATH_FEATURES_DIR = "metapath-features"
GATHER_ROWS = 1 << 16  # rows per gather through a type's tiers


def metapath_features_path(job_dir: Path, hops: int) -> Path:
    """Where a job's metapath features of `hops` hops are cached."""
    return Path(job_dir) / METAPATH_FEATURES_DIR / f"hops-{hops}.pt"


def _tier_rows(data: AttachedDataset, node_type: str) -> Tensor:
    """Every row of a featured type, type-local order, read through its tiers."""
    tiers = data.hetero_tiers(node_type)
    count = data.handle.hetero.type_named(node_type).count  # type: ignore[union-attr]  # a heterogeneous handle
    out = torch.empty((count, *tiers.row_shape), dtype=tiers.dtype)
    for start in range(0, count, GATHER_ROWS):
        ids = torch.arange(start, min(start + GATHER_ROWS, count))
        data.gather_hetero(node_type, ids, out[start : start + ids.numel()])
    return out


class MetapathInputs:
    """The target type's metapath features of one job; `forward(model, batch)` gives the seeds' logits."""

    def __init__(self, features: MetapathFeatures, target_offset: int) -> None:
        self.features, self.target_offset = features, target_offset

    @property
    def widths(self) -> list[int]:
        return self.features.widths

    def rows(self, ids: Tensor) -> Tensor:
        """The metapath features of global ids `ids` (of the target type)."""
        return self.features.matrix[ids.to(torch.int64) - self.target_offset]

    def forward(self, model: nn.Module, batch: Batch) -> Tensor:
        """The call of the pre-aggregated model on a batch: its seeds' rows, on the model's device."""
        return model(self.rows(batch.seeds.cpu()).to(batch.y.device, non_blocking=True))

    @classmethod
    def for_job(
        cls,
        data: AttachedDataset,
        job_dir: Path,
        dataset_version: str,
        hops: int,
        num_classes: int,
        ctx: DistContext,
    ) -> MetapathInputs:
        """The job's features: loaded from its directory, computed there first by each node's first rank."""
        schema = data.handle.hetero
        if schema is None:
            raise GraphtierError(f"dataset {data.handle.dataset!r} has one node type: metapath features need several")
        if data.labels is None or data.edge_type is None:
            raise GraphtierError(f"dataset {data.handle.dataset!r} has no labels or relations to pre-aggregate")
        train = data.splits["train"]
        key = {
            "dataset": data.handle.dataset,
            "version": dataset_version,
            "hops": hops,
            "num_classes": num_classes,
            "train": hashlib.sha256(train.to(torch.int64).numpy().tobytes()).hexdigest(),
        }
        path = metapath_features_path(job_dir, hops)
        if ctx.local_rank == 0 and _read(path, key) is None:
            started = time.monotonic()
            features = compute_metapath_features(
                data.graph,
                data.edge_type,
                schema,
                data.labels,
                train,
                num_classes,
                hops,
                lambda node_type: _tier_rows(data, node_type),
            )
            _write(path, key, features)
            print(
                f"metapath features of {hops} hop(s): {len(features.blocks)} blocks, {features.matrix.shape[1]} "
                f"columns, computed in {time.monotonic() - started:.1f} s into {path}",
                flush=True,
            )
        ctx.barrier()  # the node's first rank has written them
        written = _read(path, key)
        if written is None:
            raise GraphtierError(f"{path}: the job's metapath features are missing or of another dataset or split")
        return cls(written, schema.type_named(schema.target_type).offset)


def _write(path: Path, key: dict, features: MetapathFeatures) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    blocks = [asdict(block) for block in features.blocks]
    torch.save({"key": key, "blocks": blocks, "matrix": features.matrix}, partial)
    os.replace(partial, path)  # whole or absent


def _read(path: Path, key: dict) -> MetapathFeatures | None:
    """The features cached at `path` if they were computed for `key`; None otherwise."""
    try:
        saved = torch.load(path, weights_only=True)
    except FileNotFoundError:
        return None
    if saved.get("key") != key:
        return None
    return MetapathFeatures([FeatureBlock(**block) for block in saved["blocks"]], saved["matrix"])
