"""An inference job's output in the source's ids: which rows it holds, writing them, reading them back.

`output_groups` says which rows each group (node type) holds, in output order: every node in the
source's order, or the nodes of an id file in its order; each with its graphtier ids (hotness
ranks, where the layer rows are) and the source's ids. `write_shard` writes this rank's contiguous
share of a group's arrays as npy files; `group_info` describes every rank's shards (rank 0 writes
the manifest, `graphtier.contract.inference.PredictionManifest`); `read_output` maps them back
as whole arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.contract.inference import (
    HOMOGENEOUS_GROUP,
    MANIFEST_FILE,
    ArrayInfo,
    OutputGroup,
    PredictionManifest,
    ShardInfo,
)
from graphtier.service.prepared import PreparedDataset

MAX_LISTED = 5  # bad ids named in an error


@dataclass(frozen=True)
class OutputRows:
    """The rows of one group, in output order: graphtier ids and the source's ids."""

    group: str
    nodes: Tensor  # int64 graphtier (global) ids
    source_ids: Tensor  # int64 the source's ids (a heterogeneous graph's: the type's own)


def read_ids_file(path: Path) -> Tensor:
    """int64 ids from `path`: a 1-D integer .npy, or text with whitespace-separated integers
    (one a line); GraphtierError naming the file and what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise GraphtierError(f"ids file {path}: {'not a file' if path.exists() else 'no such file'}")
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise GraphtierError(f"ids file {path}: not a readable .npy ({exc})") from None
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise GraphtierError(f"ids file {path}: holds {array.dtype} {array.shape}; give a 1-D integer array")
        if array.size == 0:
            raise GraphtierError(f"ids file {path}: holds no ids")
        return torch.from_numpy(array.astype(np.int64))
    values = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        for word in line.split():
            try:
                values.append(int(word))
            except ValueError:
                raise GraphtierError(f"ids file {path}, line {number}: {word!r} is not an integer id") from None
    if not values:
        raise GraphtierError(f"ids file {path}: holds no ids")
    return torch.tensor(values, dtype=torch.int64)


def _old_ids_of(prepared: PreparedDataset, source: Tensor, count: int, where: str) -> Tensor:
    """The prepared dataset's old (source-order) ids of source ids `source` among `count` nodes."""
    if prepared.has("original_ids"):  # the source spelled its own ids (an edge list's)
        original = prepared.array("original_ids")
        order = torch.argsort(original)
        position = torch.searchsorted(original[order], source).clamp(max=max(original.numel() - 1, 0))
        found = original[order][position] == source if original.numel() else torch.zeros_like(source, dtype=torch.bool)
        old = order[position]
    else:
        found = (source >= 0) & (source < count)
        old = source
    if not bool(found.all()):
        bad = source[~found][:MAX_LISTED].tolist()
        raise GraphtierError(f"{where}: ids {bad} are not nodes of dataset {prepared.name!r}")
    return old


def output_groups(
    prepared: PreparedDataset, schema: HeteroSchema | None, ids_file: Path | None, *, hetero_ids_only: bool = True
) -> list[OutputRows]:
    """The groups an inference job writes (module docstring): every node of every type, or the id file's
    nodes (of the target type on a heterogeneous graph)."""
    old_to_new = prepared.old_to_new
    requested = read_ids_file(ids_file) if ids_file is not None else None
    where = f"ids file {ids_file}"
    if schema is None:
        n = prepared.manifest.num_nodes
        if requested is None:
            old = torch.arange(n, dtype=torch.int64)
            source = prepared.array("original_ids").to(torch.int64) if prepared.has("original_ids") else old
        else:
            old, source = _old_ids_of(prepared, requested, n, where), requested
        return [OutputRows(HOMOGENEOUS_GROUP, old_to_new[old], source)]
    groups = []
    for info in schema.node_types:
        if requested is not None and info.name != schema.target_type:
            continue
        if requested is None:
            local = torch.arange(info.count, dtype=torch.int64)
        else:
            local = requested
            bad = (local < 0) | (local >= info.count)
            if bool(bad.any()):
                raise GraphtierError(
                    f"{where}: ids {local[bad][:MAX_LISTED].tolist()} are not {info.name} nodes "
                    f"(the target type's ids run 0..{info.count - 1})"
                )
        groups.append(OutputRows(info.name, old_to_new[local + info.offset], local))
    return groups


def shard_range(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """Rows [start, end) of a group that rank `rank` writes."""
    return rank * rows // world_size, (rank + 1) * rows // world_size


def _file(group: str, name: str, rank: int) -> str:
    return f"{group}/{name}.{rank:04d}.npy"


def write_shard(
    directory: Path, rows: OutputRows, arrays_of: Callable[[Tensor], dict[str, Tensor]], rank: int, world_size: int
) -> dict[str, tuple[str, list[int]]]:
    """This rank's share of `rows`' group: `arrays_of(nodes)` gives each array's rows of graphtier ids
    `nodes`. Returns each array's (dtype, row shape), `ids` besides."""
    start, end = shard_range(rows.nodes.numel(), rank, world_size)
    (Path(directory) / rows.group).mkdir(parents=True, exist_ok=True)
    columns = {}
    for name, array in arrays_of(rows.nodes[start:end]).items():
        values = array.numpy()
        np.save(Path(directory) / _file(rows.group, name, rank), values)
        columns[name] = (str(values.dtype), list(values.shape[1:]))
    np.save(Path(directory) / _file(rows.group, "ids", rank), rows.source_ids[start:end].numpy())
    return columns


def group_info(rows: OutputRows, columns: dict[str, tuple[str, list[int]]], world_size: int) -> OutputGroup:
    """The manifest's description of a group every rank wrote with `write_shard`; `columns[name]` is each
    array's (dtype, row shape)."""
    total = rows.nodes.numel()
    every = {**columns, "ids": ("int64", [])}
    arrays = {}
    for name, (dtype, row_shape) in every.items():
        shards = []
        for rank in range(world_size):
            start, end = shard_range(total, rank, world_size)
            shards.append(ShardInfo(file=_file(rows.group, name, rank), first_row=start, rows=end - start))
        arrays[name] = ArrayInfo(dtype=dtype, shape=[total, *row_shape], shards=shards)
    return OutputGroup(rows=total, arrays=arrays)


def write_manifest(directory: Path, manifest: PredictionManifest) -> Path:
    path = Path(directory) / MANIFEST_FILE
    partial = path.with_suffix(".partial")
    partial.write_text(manifest.model_dump_json(indent=2))
    partial.replace(path)
    return path


def read_manifest(directory: Path) -> PredictionManifest:
    """The manifest of an inference output folder; GraphtierError naming it when absent or unreadable."""
    path = Path(directory) / MANIFEST_FILE
    try:
        return PredictionManifest.model_validate_json(path.read_text())
    except OSError as exc:
        raise GraphtierError(f"{path}: no inference output manifest ({exc.strerror})") from None
    except ValueError as exc:
        raise GraphtierError(f"{path}: not an inference output manifest ({exc})") from None


def read_output(directory: Path, group: str | None = None) -> dict[str, np.ndarray]:
    """An inference job's output (`graphtier job predict`, or a script's `LayerwiseRun.save`) as whole arrays.

    Args:
        directory: The output's folder: `predictions/` in the job's directory.
        group: The node type to read; None reads the only one (`node` on a graph with one type).

    Returns:
        Each array of the group by name -- `ids` (the source's id of each row), `embeddings`, and a
        classifier's `logits` and `predictions` -- its shards concatenated.

    Raises:
        GraphtierError: The folder holds no readable manifest, or no such group.
    """
    manifest = read_manifest(directory)
    if group is None:
        group = HOMOGENEOUS_GROUP if HOMOGENEOUS_GROUP in manifest.groups else next(iter(manifest.groups))
    if group not in manifest.groups:
        raise GraphtierError(f"{directory}: no group {group!r}; it has {sorted(manifest.groups)}")
    out = {}
    for name, info in manifest.groups[group].arrays.items():
        parts = [np.load(Path(directory) / shard.file, mmap_mode="r") for shard in info.shards]
        out[name] = np.concatenate(parts) if parts else np.empty(info.shape, dtype=info.dtype)
    return out
