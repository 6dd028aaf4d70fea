"""`PreparedDataset`: a prepared dataset opened read-only, its arrays memory-mapped."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.endpoints import default_dataset_root
from graphtier.contract.errors import PreparedDatasetError
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.graph.validate import check_structure
from graphtier.service.prepared.catalog import read_manifest, validate_name
from graphtier.service.prepared.digests import file_digest
from graphtier.service.prepared.manifest import DatasetManifest
from graphtier.service.prepared.npy_io import open_npy


class PreparedDataset:
    """A prepared dataset, read-only: its arrays are mapped on first use, nothing is copied into memory.

    Node ids are graphtier's: nodes renumbered by hotness rank at prepare (`new_to_old` and
    `source_ids` map them back to the source's).

    Args:
        directory: The dataset's folder (its `manifest.json` and arrays); `open` finds it by name.

    Raises:
        PreparedDatasetError: An array the manifest lists is missing, truncated or of another
            shape or dtype.

    Attributes:
        directory: The dataset's folder.
        manifest: What `dataset prepare` recorded: sizes, arrays and their checksums, splits, schema.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.manifest: DatasetManifest = read_manifest(self.directory)
        self._check_files()

    @classmethod
    def open(cls, name: str, root: Path | None = None) -> PreparedDataset:
        """Open a prepared dataset by name.

        Args:
            name: The name it was prepared under (`graphtier dataset list`).
            root: The folder of prepared datasets; None: $GRAPHTIER_HOME/datasets.

        Returns:
            The dataset.

        Raises:
            PreparedDatasetError: No dataset of that name under `root`, or a damaged one.
        """
        root = Path(root) if root else default_dataset_root()
        directory = root / validate_name(name)
        if not directory.is_dir():
            raise PreparedDatasetError(
                f"no dataset named {name!r} under {root}; `graphtier dataset list` shows the prepared ones"
            )
        return cls(directory)

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self.manifest.name

    def _check_files(self) -> None:
        for key, info in self.manifest.arrays.items():
            path = self.directory / info.file
            if not path.is_file():
                raise PreparedDatasetError(f"{path}: array {key!r} listed in the manifest is missing")
            self._check_header(key, path)  # a file of another shape: the manifest is not this file's
            if path.stat().st_size < info.nbytes:
                raise PreparedDatasetError(
                    f"{path}: truncated: {path.stat().st_size} bytes on disk, {info.nbytes} bytes of data expected"
                )

    def _check_header(self, key: str, path: Path) -> None:
        """PreparedDatasetError saying `manifest mismatch` when the `.npy` header of `path` holds another shape
        or dtype than the manifest lists for `key` (a manifest swapped in from another dataset)."""
        try:
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, _, dtype = read(f)
        except Exception:  # an unreadable header: the size check's message stands
            return
        info = self.manifest.arrays[key]
        if list(shape) != info.shape or str(dtype) != info.dtype:
            raise PreparedDatasetError(
                f"{self.directory / 'manifest.json'}: manifest mismatch: it lists {key!r} as {info.dtype} "
                f"{tuple(info.shape)}, but {path} holds {dtype} {tuple(shape)}; the manifest belongs to another "
                "dataset or another preparation of it: prepare the dataset again"
            )

    def verify(self) -> None:
        """Check every file against the manifest's checksums, then the graph's structure itself.

        The structure is checked too because checksums can be recomputed over damage.

        Raises:
            PreparedDatasetError: A file whose checksum (sha256, and BLAKE3 where recorded) differs,
                or a graph that is not a valid CSC of the dataset's nodes.
        """
        for key, info in self.manifest.arrays.items():
            path = self.directory / info.file
            for algorithm, expected in (("sha256", info.sha256), ("blake3", info.blake3)):
                if expected is None:
                    continue
                actual = file_digest(path, algorithm)
                if actual != expected:
                    raise PreparedDatasetError(
                        f"{path}: checksum mismatch for {key!r} "
                        f"({algorithm}: manifest {expected[:12]}…, file {actual[:12]}…); "
                        "the dataset is corrupt: prepare it again"
                    )
        check_structure(self.array("colptr"), self.array("row"), self.manifest.num_nodes, dataset=self.name)

    def has(self, key: str) -> bool:
        """Whether the dataset has the array `key` (see `array`)."""
        return key in self.manifest.arrays

    def array(self, key: str) -> torch.Tensor:
        """One of the dataset's arrays, memory-mapped and read-only.

        Args:
            key: The array's name in the manifest: `colptr`, `row`, `features`, `labels`,
                `train_ids`, `new_to_old`, ...

        Returns:
            The array as a tensor over the file's mapping.

        Raises:
            PreparedDatasetError: The dataset has no such array, or its file cannot be read.
        """
        if key not in self.manifest.arrays:
            raise PreparedDatasetError(f"dataset {self.name!r} has no {key!r} array")
        return self._arrays[key]

    def array_path(self, key: str) -> Path:
        """The file of the array `key`."""
        return self.directory / self.manifest.arrays[key].file

    @cached_property
    def _arrays(self) -> dict[str, torch.Tensor]:
        arrays = {}
        for key, info in self.manifest.arrays.items():
            path = self.directory / info.file
            try:
                tensor, _ = open_npy(path)
            except Exception as exc:  # numpy raises ValueError, SyntaxError, TokenError, ...
                raise PreparedDatasetError(
                    f"{path}: cannot read array {key!r} ({exc}); the dataset is damaged: prepare it again"
                ) from None
            if list(tensor.shape) != info.shape or str(tensor.numpy().dtype) != info.dtype:
                raise PreparedDatasetError(
                    f"{self.directory / info.file}: holds {str(tensor.numpy().dtype)} {list(tensor.shape)}, "
                    f"manifest says {info.dtype} {info.shape}"
                )
            arrays[key] = tensor
        return arrays

    def release(self) -> None:
        """Drop this object's file mappings (they come back on next use).

        A process that copied the arrays elsewhere (the shared-memory store) calls this so
        the page cache behind the mappings is not counted against it a second time.
        """
        self.__dict__.pop("_arrays", None)

    @property
    def graph(self) -> CSCGraph:
        """The graph as a CSC: in-edges grouped by destination (`colptr`, `row`)."""
        return CSCGraph(colptr=self.array("colptr"), row=self.array("row"))

    @property
    def features(self) -> torch.Tensor | None:
        """Node features [num_nodes, F]; None when the dataset has none."""
        return self.array("features") if self.has("features") else None

    @property
    def labels(self) -> torch.Tensor | None:
        """Node labels [num_nodes], -1 for unlabelled nodes; None when the dataset has none."""
        return self.array("labels") if self.has("labels") else None

    def split(self, name: str) -> torch.Tensor:
        """The node ids of a split.

        Args:
            name: `train`, `val` or `test`.

        Returns:
            The split's node ids (int64).

        Raises:
            PreparedDatasetError: The dataset has no such split.
        """
        return self.array(f"{name}_ids")

    @property
    def scores(self) -> torch.Tensor:
        """Each node's hotness score, by which the nodes were numbered and the tiers are filled."""
        return self.array("scores")

    @property
    def new_to_old(self) -> torch.Tensor:
        """For each graphtier id, the node's index in the source as read at prepare."""
        return self.array("new_to_old")

    @property
    def old_to_new(self) -> torch.Tensor:
        """For each node's index in the source, its graphtier id (`new_to_old` inverted)."""
        return self.array("old_to_new")

    def source_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """The source's ids of nodes, for predictions, embeddings and ids compared with the source's files.

        Args:
            ids: graphtier ids of nodes.

        Returns:
            Their ids in the source: `new_to_old`, then the ids the source file spelled where it had
                its own (an edge list's).
        """
        old = self.new_to_old[ids.to(torch.int64).cpu()]
        return self.array("original_ids")[old] if self.has("original_ids") else old
