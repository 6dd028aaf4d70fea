"""A graph's train/val/test split: from a split file (`split_from_file`), the source's own, or a
seeded random one for graphs whose source ships none (`ensure_split`).

Training needs train ids (the producers' seeds), so every loaded graph gets a split: the
source's own split when it has one, otherwise this one. Candidates are the labelled nodes
(all nodes when the graph has no labels); they are shuffled with a seeded generator and
cut into consecutive train / val / test parts of `floor(fraction * candidates)` ids each.
The rule and its parameters are recorded in `description["split"]` so a prepared dataset
says how its split was made.
"""

from __future__ import annotations

import dataclasses
import math
import zipfile
import zlib
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData


def _check_fractions(origin: str, fractions: dict[str, float]) -> None:
    for name, value in fractions.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
            raise DatasetSourceError(origin or None, f"{name} must be a number in [0, 1], got {value!r}")
    total = sum(fractions.values())
    if total > 1.0 + 1e-9:
        parts = " + ".join(f"{name} {value}" for name, value in fractions.items())
        raise DatasetSourceError(origin or None, f"split fractions add up to {total:g} > 1 ({parts})")


def ensure_split(
    graph: GraphData,
    *,
    train_fraction: float = 0.1,
    val_fraction: float = 0.05,
    test_fraction: float = 0.1,
    seed: int = 0,
    asked: bool = True,
) -> GraphData:
    """Return `graph` unchanged if it has a non-empty train split, else a copy with a random one.
    `asked` False: nobody chose the random split (no fraction, seed or --default-split given); it is
    recorded so (`split.asked`) with a note, and jobs refuse the dataset until a split is chosen.

    Raises `DatasetSourceError` (naming the graph's origin) for fractions outside [0, 1],
    fractions summing above 1, a graph with labels but no labelled node, or a train
    fraction too small to give at least one train node.
    """
    fractions = {"train_fraction": train_fraction, "val_fraction": val_fraction, "test_fraction": test_fraction}
    _check_fractions(graph.origin, fractions)
    existing = graph.splits.get("train")
    if existing is not None and existing.numel() > 0:
        return graph
    if graph.labels is not None:
        candidates = (graph.labels != UNLABELLED).nonzero().flatten()
        among = "labelled nodes"
        if candidates.numel() == 0:
            raise DatasetSourceError(graph.origin or None, "cannot make a split: no node has a label")
    else:
        candidates = torch.arange(graph.num_nodes, dtype=torch.int64)
        among = "all nodes (the graph has no labels)"
    n = candidates.numel()
    counts = [math.floor(f * n + 1e-9) for f in (train_fraction, val_fraction, test_fraction)]
    if counts[0] == 0:
        raise DatasetSourceError(
            graph.origin or None,
            f"train_fraction {train_fraction} of {n} candidate nodes gives an empty train split",
        )
    generator = torch.Generator().manual_seed(int(seed))
    shuffled = candidates[torch.randperm(n, generator=generator)]
    bounds = [0, counts[0], counts[0] + counts[1], sum(counts)]
    splits = {
        name: shuffled[bounds[i] : bounds[i + 1]].sort().values for i, name in enumerate(("train", "val", "test"))
    }
    description = dict(graph.description)
    description["split"] = {
        "rule": "seeded random permutation of the candidates, cut into train/val/test",
        "among": among,
        "seed": int(seed),
        **fractions,
        "counts": dict(zip(("train", "val", "test"), counts, strict=True)),
        "asked": asked,
    }
    notes = list(graph.notes)
    if not asked:
        notes.append(
            f"the source has no split: a random {train_fraction:g}/{val_fraction:g}/{test_fraction:g} one was made, "
            "which jobs refuse; give the data's split (--split FILE), fractions (--train-fraction ...), or "
            "accept this one (--default-split)"
        )
    return dataclasses.replace(graph, splits=splits, description=description, notes=notes).validate()


# Names a split file may give each part: masks first (Geom-GCN's and PyG's), then index arrays (OGB's, Planetoid's).
SPLIT_KEYS: dict[str, tuple[str, ...]] = {
    "train": ("train_mask", "train", "train_idx", "idx_train", "train_ids"),
    "val": ("val_mask", "valid_mask", "val", "valid", "val_idx", "valid_idx", "idx_val", "val_ids"),
    "test": ("test_mask", "test", "test_idx", "idx_test", "test_ids"),
}


def _split_part(path: Path, key: str, array: np.ndarray, num_nodes: int, index: int | None) -> torch.Tensor:
    """One part's node ids from a boolean mask ([N], or [N, K] with `index`; an integer one of 0s and 1s)
    or an index array."""
    where = f"{path}: {key!r}"
    if key.endswith("mask") and array.dtype.kind == "i" and array.size and int(array.min()) < 0:
        at = np.unravel_index(int(np.argmin(array)), array.shape)
        raise DatasetSourceError(
            path,
            f"mask {key!r} holds {int(array[at])} at index {at[0] if len(at) == 1 else tuple(int(i) for i in at)}: "
            "a mask holds 0 (out) and 1 (in), or booleans",
        )
    if array.dtype == np.bool_ or (key.endswith("mask") and array.dtype.kind in "iu" and array.max(initial=0) <= 1):
        mask = array.astype(bool)
        if mask.ndim == 2:
            if index is None:
                raise DatasetSourceError(
                    path, f"{key!r} holds {mask.shape[1]} splits", fix="choose one with --split-index K"
                )
            if not 0 <= index < mask.shape[1]:
                raise DatasetSourceError(
                    path, f"--split-index {index} is outside the {mask.shape[1]} splits of {key!r}"
                )
            mask = mask[:, index]
        elif index not in (None, 0):
            raise DatasetSourceError(path, f"{key!r} holds one split; --split-index {index} asks for another")
        if mask.ndim != 1 or mask.shape[0] != num_nodes:
            raise DatasetSourceError(
                path, f"mask {key!r} of shape {mask.shape} does not cover the graph's {num_nodes} nodes"
            )
        return torch.from_numpy(np.flatnonzero(mask).astype(np.int64))
    if array.dtype.kind not in "iu" or array.ndim != 1:
        raise DatasetSourceError(
            path, f"{where} is neither a boolean mask nor a 1-D array of node ids ({array.dtype}, {array.shape})"
        )
    ids = torch.from_numpy(array.astype(np.int64))
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_nodes):
        raise DatasetSourceError(path, f"{where} holds node ids outside [0, {num_nodes})")
    return ids.unique()


def split_from_file(graph: GraphData, path: Path, index: int | None = None) -> GraphData:
    """`graph` with the split of `path`, an `.npz` of masks (`train_mask`/`val_mask`/`test_mask`, [N] or
    [N, K] with `index` choosing column K, as Geom-GCN's and PyG's split files hold them) or of id arrays
    (`train`/`val`/`test`, `train_idx`/`valid_idx`/`test_idx`, ...), in the source's node ids. Replaces the
    source's own split; recorded in `description["split"]`. DatasetSourceError naming the file and what is
    wrong with it."""
    path = Path(path).expanduser()
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a plain .npy: one array, no part named
            raise DatasetSourceError(
                path,
                f"holds one array ({loaded.dtype}, shape {loaded.shape}), not the named parts of a split",
                fix="save them as an .npz: np.savez(f, train_mask=..., val_mask=..., test_mask=...)",
            )
        with loaded:
            arrays = {key: loaded[key] for key in loaded.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:  # cut short, damaged
        raise DatasetSourceError(
            path, f"cannot read a split from it ({type(exc).__name__}: {exc})", fix="give an .npz of masks or id arrays"
        ) from None
    splits: dict[str, torch.Tensor] = {}
    used: dict[str, str] = {}
    for part, names in SPLIT_KEYS.items():
        key = next((name for name in names if name in arrays), None)
        if key is not None:
            splits[part], used[part] = _split_part(path, key, arrays[key], graph.num_nodes, index), key
    if "train" not in splits or splits["train"].numel() == 0:
        raise DatasetSourceError(
            path, f"no train ids in it (keys {sorted(arrays)})", fix=f"name them one of {list(SPLIT_KEYS['train'])}"
        )
    description = dict(graph.description)
    description["split"] = {
        "rule": "from a split file",
        "file": str(path.resolve()),
        "index": index,
        "keys": used,
        "counts": {part: int(ids.numel()) for part, ids in splits.items()},
    }
    return dataclasses.replace(graph, splits=splits, description=description).validate()


def note_missing_parts(graph: GraphData) -> GraphData:
    """`graph` with a note for each of the val and test parts its split lacks (or has empty): jobs then
    train without that evaluation, which should be a choice, not a surprise."""
    missing = [part for part in ("val", "test") if graph.splits.get(part) is None or graph.splits[part].numel() == 0]
    if not missing:
        return graph
    what = {
        "val": "validation nodes: jobs choose no best epoch by it",
        "test": "test nodes: jobs report no test figure",
    }
    notes = [*graph.notes, *(f"the split has no {what[part]}" for part in missing)]
    return dataclasses.replace(graph, notes=notes)
