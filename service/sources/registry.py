"""`load_source(spec, **options)`: one entry point from a dataset spec string to a `GraphData`.

A spec is `scheme:target`: `synthetic:rmat`, `planetoid:DIR`, `npz:FILE`, `edges:FILE`,
`ogb:DIR` or `geomgcn:DIR`. Options are checked against what the chosen reader takes before anything is
read, so a typo fails fast with the list of valid options. Every loaded graph then goes
through `label_classes` (labels bounded by `num_classes` when given, else made dense) and
`ensure_split` (a no-op when the source ships a split), which is why `num_classes` and the
split options `train_fraction`, `val_fraction`, `test_fraction` and `split_seed` are accepted
for every scheme (for `synthetic:` `num_classes` is the number of planted communities). A file
source also takes `split_file` (and `split_index` for a file of several splits): the split that
comes with the data (`split_from_file`), in place of the source's own or a random one.
"""

from __future__ import annotations

import dataclasses
import inspect
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import GraphData
from graphtier.service.graph.streamed import StreamedGraph
from graphtier.service.sources.edge_list import load_edge_list
from graphtier.service.sources.geomgcn import load_geomgcn
from graphtier.service.sources.label_classes import label_classes
from graphtier.service.sources.npz import load_npz
from graphtier.service.sources.ogb import load_ogb
from graphtier.service.sources.planetoid import load_planetoid
from graphtier.service.sources.split import ensure_split, note_missing_parts, split_from_file

if TYPE_CHECKING:
    from graphtier.service.out_of_core.memory_budget import MemoryPlan

SOURCE_SCHEMES: tuple[str, ...] = ("synthetic", "planetoid", "npz", "edges", "ogb", "geomgcn")
SPLIT_OPTIONS: tuple[str, ...] = ("train_fraction", "val_fraction", "test_fraction", "split_seed")
LABEL_OPTIONS: tuple[str, ...] = ("num_classes",)
SPLIT_FILE_OPTIONS: tuple[str, ...] = ("split_file", "split_index", "default_split")
SYNTHETIC_GENERATORS: tuple[str, ...] = ("rmat",)
FILE_OPTIONS: tuple[str, ...] = ("features", "labels")  # readers' options naming files (edges:'s features, labels)
# Keyword options of `synthetic.generate_rmat`; its fractions make the split, `seed` drives the generator.
SYNTHETIC_OPTIONS: tuple[str, ...] = (
    "scale",
    "edge_factor",
    "num_classes",
    "feature_dim",
    "homophily",
    "feature_noise",
    "train_fraction",
    "val_fraction",
    "test_fraction",
    "seed",
)
_EXAMPLES = "synthetic:rmat, planetoid:DIR, npz:FILE, edges:FILE, ogb:DIR, geomgcn:DIR"

_READERS: dict[str, Callable[..., GraphData]] = {
    "planetoid": load_planetoid,
    "npz": load_npz,
    "edges": load_edge_list,
    "ogb": load_ogb,
    "geomgcn": load_geomgcn,
}


def reader_options(scheme: str) -> tuple[str, ...]:
    """Option names `load_source` accepts for `scheme` (reader keywords plus split options)."""
    if scheme == "synthetic":
        return SYNTHETIC_OPTIONS + ("split_seed", "default_split")
    params = list(inspect.signature(_READERS[scheme]).parameters.values())[1:]  # first one is the path
    return tuple(p.name for p in params) + LABEL_OPTIONS + SPLIT_OPTIONS + SPLIT_FILE_OPTIONS


def _parse(spec: str) -> tuple[str, str]:
    scheme, sep, target = spec.partition(":")
    if not sep or not target:
        raise DatasetSourceError(None, f"dataset spec {spec!r} is not scheme:target", fix=f"use one of {_EXAMPLES}")
    if scheme not in SOURCE_SCHEMES:
        raise DatasetSourceError(
            None, f"unknown dataset scheme {scheme!r} in {spec!r}", fix=f"valid schemes: {', '.join(SOURCE_SCHEMES)}"
        )
    return scheme, target


def _generate(target: str, options: dict[str, Any]) -> GraphData:
    if target not in SYNTHETIC_GENERATORS:
        raise DatasetSourceError(
            None, f"unknown synthetic generator {target!r}", fix=f"valid: {', '.join(SYNTHETIC_GENERATORS)}"
        )
    from graphtier.service.sources.synthetic import generate_rmat  # lazy: written separately

    return generate_rmat(**options)


def _check_options(scheme: str, options: dict[str, Any]) -> None:
    valid = reader_options(scheme)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise DatasetSourceError(
            None,
            f"option(s) {', '.join(unknown)} not accepted by {scheme}: sources",
            fix=f"valid options: {', '.join(valid)}",
        )


def load_source_stream(spec: str, spill_dir: Path, plan: MemoryPlan, **options: Any) -> StreamedGraph:
    """`load_source` for preparation under a memory budget: the synthetic generator draws its
    edges and features in chunks into spill files under `spill_dir` (the same bytes as
    `load_source`); the file readers load whole, and their graph is wrapped as chunk streams.
    `plan` learns the node count before anything O(E) is held."""
    scheme, target = _parse(spec)
    if scheme != "synthetic" or target not in SYNTHETIC_GENERATORS:
        graph = StreamedGraph.from_graph_data(load_source(spec, **options))
        plan.reserve_nodes(graph.num_nodes)
        return graph
    _check_options(scheme, options)
    from graphtier.service.sources.synthetic_stream import stream_rmat

    # the generator makes its own split
    generator_options = {k: v for k, v in options.items() if k not in ("split_seed", "default_split")}
    return stream_rmat(spill_dir, plan, **generator_options)


def load_source(spec: str, **options: Any) -> GraphData:
    """Load the dataset named by `spec` and give it a split (see module docstring).

    Raises `DatasetSourceError` for an unknown scheme, a missing path, an option the reader
    does not take, and anything the reader itself rejects.
    """
    scheme, target = _parse(spec)
    _check_options(scheme, options)
    split: dict[str, Any] = {k: options[k] for k in SPLIT_OPTIONS[:3] if k in options}
    if "split_seed" in options:
        split["seed"] = options.pop("split_seed")
    accepted_default = bool(options.pop("default_split", False))
    split["asked"] = bool(split) or accepted_default
    if scheme == "synthetic":  # the generator makes its own split from the same fractions
        graph = _generate(target, options)
    else:
        for key in SPLIT_OPTIONS[:3]:
            options.pop(key, None)
        num_classes = options.pop("num_classes", None)
        split_file, split_index = options.pop("split_file", None), options.pop("split_index", None)
        if split_index is not None and split_file is None:
            raise DatasetSourceError(
                None, f"split_index {split_index} chooses among a split file's splits", fix="give --split FILE"
            )
        path = Path(target).expanduser()
        check_input_path(path, f"from dataset spec {spec!r}", directory_too=True)
        for option in FILE_OPTIONS:  # every file the reader opens besides the source, before any is opened
            if options.get(option) is not None:
                check_input_path(Path(options[option]).expanduser(), f"--{option.replace('_', '-')}")
        if split_file is not None:
            check_input_path(Path(split_file).expanduser(), "--split")
        graph = _checked_labels(_READERS[scheme](path, **options), num_classes)
        if split_file is not None:
            graph = split_from_file(graph, Path(split_file), split_index)
    return note_missing_parts(ensure_split(graph, **split))


def check_input_path(path: Path, given: str, *, directory_too: bool = False) -> None:
    """DatasetSourceError naming `path` (and the flag or spec it was `given` as) unless it exists and is a
    regular file (or, with `directory_too`, a directory). Looked at with stat alone: opening a FIFO
    would wait for a writer forever, and a device (/dev/zero) reads without end; an input is read to
    its end, so it must have one."""
    if not path.exists():
        raise DatasetSourceError(path, f"does not exist ({given})")
    if path.is_file() or (directory_too and path.is_dir()):
        return
    if path.is_dir():
        raise DatasetSourceError(path, f"is a directory, not a file ({given})")
    wanted = "a regular file or directory" if directory_too else "a regular file"
    raise DatasetSourceError(
        path,
        f"is {_file_kind(path)}, not {wanted} ({given}): an input is read to its end, so it must have one; "
        "save the data to a file first",
    )


def _file_kind(path: Path) -> str:
    mode = path.stat().st_mode
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "a special file"


def _checked_labels(graph: GraphData, num_classes: int | None) -> GraphData:
    """`graph` with its labels bounded by `num_classes`, or made dense (`label_classes`)."""
    if graph.labels is None:
        if num_classes is not None:
            raise DatasetSourceError(
                graph.origin or None, f"--num-classes {num_classes} was given but the source has no labels"
            )
        return graph
    checked = label_classes(
        graph.labels, origin=graph.origin or None, num_classes=num_classes, node_ids=graph.original_ids
    )
    notes = graph.notes + ([checked.note] if checked.note else [])
    return dataclasses.replace(
        graph, labels=checked.labels, class_count=checked.num_classes, class_labels=checked.class_labels, notes=notes
    )
