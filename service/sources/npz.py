"""gnn-benchmark `.npz` graphs (shchur/gnn-benchmark: cora.npz, citeseer.npz, amazon_*, ms_academic_*).

Keys: the adjacency as CSR `adj_data/adj_indices/adj_indptr/adj_shape` (entry [i, j] is a
directed edge i -> j), features as CSR `attr_*` or a dense `attr_matrix`, integer `labels`.
The archive is opened with `allow_pickle=False` and only the needed keys are read, so
object-array keys such as `idx_to_node` are never unpickled. These files carry no split.
The CSR keys are checked and expanded with numpy (`graphtier.service.sources.csr`).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED, GraphData
from graphtier.service.sources.csr import Csr

_CSR_PARTS = ("data", "indices", "indptr", "shape")


class _Archive:
    """Key access to an `.npz` that turns every failure into an error naming the key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._npz = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise DatasetSourceError(path, "file not found") from None
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise DatasetSourceError(path, f"not a readable .npz archive ({exc})") from None
        if not isinstance(self._npz, np.lib.npyio.NpzFile):
            raise DatasetSourceError(path, "holds a single array, expected an .npz archive of named arrays")

    def __contains__(self, key: str) -> bool:
        return key in self._npz.files

    def get(self, key: str) -> np.ndarray:
        if key not in self:
            raise DatasetSourceError(self.path, f"missing key {key!r} (keys present: {sorted(self._npz.files)})")
        try:
            return self._npz[key]
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            raise DatasetSourceError(
                self.path, f"key {key!r} cannot be read without pickle or is corrupt ({exc})"
            ) from None

    def csr(self, prefix: str) -> Csr:
        data, indices, indptr, shape = (self.get(f"{prefix}_{part}") for part in _CSR_PARTS)
        try:  # out-of-range indices surface here, not deep in a later step
            return Csr.checked(data, indices, indptr, shape)
        except ValueError as exc:
            raise DatasetSourceError(self.path, f"keys {prefix}_* do not form a valid CSR matrix ({exc})") from None

    def dense(self, prefix: str) -> np.ndarray:
        matrix = self.csr(prefix)
        try:
            return matrix.dense()
        except ValueError as exc:
            raise DatasetSourceError(self.path, f"keys {prefix}_* cannot be made a dense matrix ({exc})") from None

    def close(self) -> None:
        self._npz.close()


def load_npz(path: str | Path) -> GraphData:
    """Read a gnn-benchmark `.npz` into a `GraphData` (directed edges, no split)."""
    path = Path(path)
    archive = _Archive(path)
    try:
        adj = archive.csr("adj")
        num_nodes = adj.shape[0]
        if adj.shape[0] != adj.shape[1]:
            raise DatasetSourceError(path, f"key 'adj_shape' is {adj.shape}, expected a square matrix")
        keep = adj.data != 0
        src = torch.from_numpy(adj.rows()[keep])
        dst = torch.from_numpy(adj.indices[keep])

        attributes: np.ndarray | None = None
        features: torch.Tensor | None = None
        if "attr_matrix" in archive:
            dense = archive.get("attr_matrix")
            if dense.ndim != 2:
                raise DatasetSourceError(path, f"key 'attr_matrix' has shape {dense.shape}, expected [N, F]")
            attributes = dense
        elif "attr_data" in archive:
            attributes = archive.dense("attr")
        if attributes is not None:
            if attributes.shape[0] != num_nodes:
                raise DatasetSourceError(
                    path, f"attributes have {attributes.shape[0]} rows, adjacency has {num_nodes} nodes"
                )
            if attributes.dtype.kind not in "biuf":
                raise DatasetSourceError(path, f"attributes must be numeric, got dtype {attributes.dtype}")
            features = torch.from_numpy(attributes.astype(np.float32))

        labels = None
        if "labels" in archive:
            raw = archive.get("labels")
            if raw.ndim != 1 or raw.shape[0] != num_nodes or raw.dtype.kind not in "biu":
                raise DatasetSourceError(
                    path, f"key 'labels' has shape {raw.shape} dtype {raw.dtype}, expected [{num_nodes}] integers"
                )
            labels = torch.from_numpy(raw.astype(np.int64))
        elif "labels_data" in archive:
            raise DatasetSourceError(
                path, "holds multi-label CSR labels (labels_*); only single-label classification is supported"
            )

        class_names = None
        if "class_names" in archive:
            try:  # optional and informational: skipped when it would need pickle
                names = archive.get("class_names")
            except DatasetSourceError:
                names = np.empty(0, dtype=object)
            class_names = [str(n) for n in names.tolist()] if names.dtype.kind == "U" else None
    finally:
        archive.close()

    graph = GraphData(
        num_nodes=num_nodes,
        src=src,
        dst=dst,
        features=features,
        labels=labels,
        origin=str(path),
        description={
            "format": "gnn_benchmark_npz",
            "directed": True,
            "class_names": class_names,
            "unlabelled_nodes": int((labels == UNLABELLED).sum()) if labels is not None else None,
        },
    )
    return graph.validate()
