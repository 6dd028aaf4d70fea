"""Planetoid citation datasets (Cora, CiteSeer, PubMed) from their raw `ind.<name>.*` files.

The files are Python-2 pickles of scipy/numpy objects plus a text `test.index`. They are
read with a restricted unpickler that resolves only the handful of classes these files
use, so a tampered file cannot run code; scipy's `csr_matrix` resolves to `_PickledCsr`, which
keeps the pickled arrays for `Csr` to check and densify, so reading them needs no scipy.
Assembly follows tkipf/gcn `load_data`: node i's features are `allx[i]` for i < len(allx)
and `tx[k]` for `i = test.index[k]`; ids in the test range without a row (CiteSeer's 15
isolated nodes) get zero features and label -1.
The standard split is train = `range(len(y))`, val = the next 500 ids, test = test.index.
"""

from __future__ import annotations

import collections
import importlib
import pickle
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData
from graphtier.service.sources.csr import Csr
from graphtier.service.sources.numeric_text import NumericText

_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
_VAL_SIZE = 500  # tkipf/gcn's validation split: the 500 ids after the training ids


def _reconstruct() -> Any:
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    return multiarray._reconstruct


class _PickledCsr:
    """What a pickled scipy `csr_matrix` becomes here. Its pickle (protocol 2 and later) makes the
    object with `cls.__new__(cls)` and hands it the scipy instance's `__dict__`: `data`, `indices`,
    `indptr` and `_shape`, beside bookkeeping such as `maxprint` and `format`, which is ignored.
    Nothing else of the file's state is kept or run."""

    _state: Any = None

    def __setstate__(self, state: Any) -> None:
        self._state = state

    def csr(self) -> Csr:
        """The pickled matrix, checked; ValueError naming what is missing or inconsistent."""
        state = self._state
        if not isinstance(state, dict):
            raise ValueError(f"its state is {type(state).__name__}, expected the matrix's attribute dict")
        missing = [key for key in ("data", "indices", "indptr", "_shape") if key not in state]
        if missing:
            raise ValueError(f"it lacks {', '.join(missing)}")
        return Csr.checked(state["data"], state["indices"], state["indptr"], state["_shape"])


class _PlanetoidUnpickler(pickle.Unpickler):
    """Resolves only the globals Planetoid pickles reference; anything else is refused."""

    _ALLOWED = {
        ("numpy", "ndarray"): lambda: np.ndarray,
        ("numpy", "dtype"): lambda: np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
        ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
        ("scipy.sparse.csr", "csr_matrix"): lambda: _PickledCsr,  # scipy < 1.8
        ("scipy.sparse._csr", "csr_matrix"): lambda: _PickledCsr,
        ("collections", "defaultdict"): lambda: collections.defaultdict,
        ("__builtin__", "list"): lambda: list,
        ("builtins", "list"): lambda: list,
    }

    def find_class(self, module: str, name: str) -> Any:
        resolve = self._ALLOWED.get((module, name))
        if resolve is None:
            raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")
        return resolve()


def _unpickle(path: Path) -> Any:
    try:
        with path.open("rb") as handle:
            return _PlanetoidUnpickler(handle, encoding="latin1").load()
    except FileNotFoundError:
        raise DatasetSourceError(path, "file not found") from None
    except Exception as exc:  # any failure of an untrusted pickle is a bad file, not a bug
        raise DatasetSourceError(path, f"not a readable Planetoid pickle ({type(exc).__name__}: {exc})") from None


def _matrix(path: Path, obj: Any, *, sparse: bool) -> np.ndarray:
    """A 2-D dense array from a pickled csr_matrix (features) or ndarray (one-hot labels)."""
    if isinstance(obj, _PickledCsr):
        try:
            obj = obj.csr().dense()
        except ValueError as exc:
            raise DatasetSourceError(path, f"holds an inconsistent sparse matrix ({exc})") from None
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or obj.dtype.kind not in "biuf":
        kind = "a scipy sparse matrix" if sparse else "a 2-D numeric numpy array"
        raise DatasetSourceError(path, f"expected {kind}, found {type(obj).__name__}")
    return obj


def _labels(path: Path, onehot: np.ndarray) -> np.ndarray:
    """Argmax of one-hot rows; all-zero rows are unlabelled (-1)."""
    labels = onehot.argmax(axis=1).astype(np.int64)
    labels[~onehot.any(axis=1)] = UNLABELLED
    return labels


def _edges(path: Path, adjacency: Any) -> tuple[np.ndarray, np.ndarray]:
    """Flatten `{node: [neighbours]}` into (src, dst) arrays; every listed pair is kept."""
    if not isinstance(adjacency, dict) or not adjacency:
        raise DatasetSourceError(path, f"expected a non-empty adjacency dict, found {type(adjacency).__name__}")
    try:
        keys = np.fromiter(adjacency.keys(), dtype=np.int64, count=len(adjacency))
        lengths = np.fromiter(map(len, adjacency.values()), dtype=np.int64, count=len(adjacency))
        dst = np.fromiter((v for nbrs in adjacency.values() for v in nbrs), dtype=np.int64, count=int(lengths.sum()))
    except (TypeError, ValueError, OverflowError) as exc:
        raise DatasetSourceError(path, f"adjacency must map int ids to lists of int ids ({exc})") from None
    src = np.repeat(keys, lengths)
    if src.size == 0:
        raise DatasetSourceError(path, "adjacency lists are all empty: the graph has no edges")
    if int(min(src.min(), dst.min())) < 0:
        raise DatasetSourceError(path, "adjacency contains negative node ids")
    return src, dst


def _infer_name(directory: Path) -> str:
    names = sorted(p.name[len("ind.") : -len(".graph")] for p in directory.glob("ind.*.graph"))
    if len(names) == 1:
        return names[0]
    if not names:
        raise DatasetSourceError(directory, "holds no ind.<name>.graph file; is this a Planetoid directory?")
    raise DatasetSourceError(directory, f"holds several Planetoid datasets {names}; pass name= to pick one")


def load_planetoid(
    directory: str | Path,
    name: str | None = None,
    *,
    missing_features: Literal["error", "zeros"] = "error",
) -> GraphData:
    """Assemble a Planetoid dataset as tkipf/gcn does (see module docstring).

    Args:
        directory: folder holding `ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index}`.
        name: dataset name (`cora`, ...); inferred when the folder holds exactly one.
        missing_features: when `ind.<name>.allx` is absent (as in the shared PubMed copy),
            "error" refuses; "zeros" keeps `x` and `tx` rows and gives every other node a zero
            row, counted in `description["featureless_nodes"]`.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetSourceError(directory, "is not a directory (expected a folder of ind.<name>.* files)")
    if missing_features not in ("error", "zeros"):
        raise DatasetSourceError(directory, f"missing_features must be 'error' or 'zeros', got {missing_features!r}")
    name = name or _infer_name(directory)
    files = {part: directory / f"ind.{name}.{part}" for part in _PARTS}
    absent = [part for part, f in files.items() if not f.is_file()]
    if "allx" in absent and missing_features == "zeros":
        absent.remove("allx")
    if absent:
        fix = None
        if absent == ["allx"]:
            fix = (
                "pass --missing-features zeros (missing_features='zeros' in Python) "
                "to give nodes without features zero rows"
            )
        raise DatasetSourceError(files[absent[0]], f"missing Planetoid file (absent: {', '.join(absent)})", fix=fix)

    x = _matrix(files["x"], _unpickle(files["x"]), sparse=True)
    tx = _matrix(files["tx"], _unpickle(files["tx"]), sparse=True)
    allx = _matrix(files["allx"], _unpickle(files["allx"]), sparse=True) if files["allx"].is_file() else None
    y = _matrix(files["y"], _unpickle(files["y"]), sparse=False)
    ty = _matrix(files["ty"], _unpickle(files["ty"]), sparse=False)
    ally = _matrix(files["ally"], _unpickle(files["ally"]), sparse=False)
    src, dst = _edges(files["graph"], _unpickle(files["graph"]))
    index_table = NumericText.read(files["test.index"])
    if index_table.num_rows == 0:
        raise DatasetSourceError(files["test.index"], "lists no test ids")
    index_table.require_columns(1, exact=True)
    test = index_table.ints(0)

    def check(ok: bool, part: str, problem: str) -> None:
        if not ok:
            raise DatasetSourceError(files[part], problem)

    num_known = allx.shape[0] if allx is not None else ally.shape[0]
    check(ally.shape[0] == num_known, "ally", f"has {ally.shape[0]} rows but allx has {num_known}")
    check(y.shape[0] == x.shape[0] and y.shape[0] <= num_known, "y", f"has {y.shape[0]} rows; x has {x.shape[0]}")
    check(
        ty.shape[0] == tx.shape[0] == test.size,
        "ty",
        f"has {ty.shape[0]} rows; tx {tx.shape[0]}, test.index {test.size}",
    )
    widths = {m.shape[1] for m in (x, tx, allx) if m is not None}
    check(len(widths) == 1, "tx", f"feature widths differ between x/tx/allx: {sorted(widths)}")
    classes = {m.shape[1] for m in (y, ty, ally)}
    check(len(classes) == 1, "ty", f"label widths differ between y/ty/ally: {sorted(classes)}")
    check(int(test.min()) >= num_known, "test.index", f"test id {int(test.min())} overlaps the {num_known} allx rows")
    check(np.unique(test).size == test.size, "test.index", "lists a test id more than once")

    num_nodes = int(max(num_known, test.max() + 1, src.max() + 1, dst.max() + 1))
    features = np.zeros((num_nodes, widths.pop()), dtype=np.float32)
    if allx is not None:
        features[:num_known] = allx
    else:
        features[: x.shape[0]] = x  # x holds the first len(y) rows of allx
    features[test] = tx
    labels = np.full(num_nodes, UNLABELLED, dtype=np.int64)
    labels[:num_known] = _labels(files["ally"], ally)
    labels[test] = _labels(files["ty"], ty)
    have_rows = np.zeros(num_nodes, dtype=bool)
    have_rows[: num_known if allx is not None else x.shape[0]] = True
    have_rows[test] = True
    val_end = min(y.shape[0] + _VAL_SIZE, num_known)
    splits = {
        "train": torch.arange(y.shape[0], dtype=torch.int64),
        "val": torch.arange(y.shape[0], val_end, dtype=torch.int64),
        "test": torch.from_numpy(test.copy()),
    }
    graph = GraphData(
        num_nodes=num_nodes,
        src=torch.from_numpy(src),
        dst=torch.from_numpy(dst),
        features=torch.from_numpy(features),
        labels=torch.from_numpy(labels),
        splits=splits,
        origin=str(directory),
        description={
            "format": "planetoid",
            "name": name,
            "split": {"rule": "planetoid standard: train = range(len(y)), val = the next 500 ids, test = test.index"},
            "padded_test_ids": int(num_nodes - num_known - test.size),
            "featureless_nodes": int((~have_rows).sum()),
            "missing_files": [] if allx is not None else [files["allx"].name],
            "featureless_by_split": _featureless_by_split(have_rows, splits),
        },
        notes=_featureless_note(have_rows, splits, allx is None),
    )
    return graph.validate()


def _featureless_by_split(have_rows: np.ndarray, splits: dict[str, torch.Tensor]) -> dict[str, int]:
    return {name: int((~have_rows[ids.numpy()]).sum()) for name, ids in splits.items()}


def _featureless_note(have_rows: np.ndarray, splits: dict[str, torch.Tensor], allx_missing: bool) -> list[str]:
    """A note when nodes got zero feature rows: how many, in each split, and why."""
    missing = int((~have_rows).sum())
    if missing == 0:
        return []
    counts = _featureless_by_split(have_rows, splits)
    by_split = ", ".join(f"{name} {count:,} of {splits[name].numel():,}" for name, count in counts.items())
    why = (
        "allx is absent, so --missing-features zeros gave them zero rows"
        if allx_missing
        else "the files give them no row"
    )
    hit = [name for name, count in counts.items() if count]
    tail = (
        f"; a model sees those nodes only through their neighbours, so {'/'.join(hit)} accuracy says little "
        "about the features"
        if hit
        else ""
    )
    return [
        f"{missing:,} of {have_rows.size:,} nodes ({missing / have_rows.size:.1%}) have no features ({why}): "
        f"{by_split}{tail}"
    ]
