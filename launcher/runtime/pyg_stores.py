"""PyG's remote-backend interface over graphtier's data: `(feature_store, graph_store)`.

    from torch_geometric.loader import NeighborLoader
    from graphtier.pyg import GraphtierSampler, stores
    from graphtier.loader import PreparedDataset

    cora = PreparedDataset.open("cora")             # a prepared dataset, outside any job
    loader = NeighborLoader(stores(cora), num_neighbors=[25, 10], input_nodes=cora.split("train"),
                            neighbor_sampler=GraphtierSampler(cora, [25, 10]), batch_size=64)

trains a PyG script unchanged, with features read from graphtier's tiers (`tiered_gather`,
traffic counted) and the CSC taken as is, no copy; PyG's default sampler would need pyg-lib or
torch-sparse, graphtier's `GraphtierSampler` replaces it.
The stores are read-only and homogeneous: one node group (`group_name=None`) with the
tensors `x` (features) and `y` (labels), one edge type (`edge_type=None`) whose CSC is
(`row`, `colptr`). Node ids are the dataset's reordered ids (`new_to_old` maps back).

Importing this module needs torch_geometric.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import EdgeAttr, FeatureStore, GraphStore, TensorAttr
from torch_geometric.data.graph_store import EdgeLayout

from graphtier.contract.errors import GraphtierError
from graphtier.service.gather import FeatureTiers, TrafficCounts, tiered_gather
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.prepared import PreparedDataset
from graphtier.service.store import AttachedDataset

FEATURES, LABELS = "x", "y"
_ROW_ALIGN = 64  # bytes: a cache line, where the gather's streaming stores need each row to start


def _tiers_and_labels(
    dataset: PreparedDataset | AttachedDataset, device_index: int
) -> tuple[FeatureTiers, Tensor | None]:
    if isinstance(dataset, AttachedDataset):
        return dataset.feature_tiers(device_index), dataset.labels
    if isinstance(dataset, PreparedDataset):
        features = dataset.features
        if features is None:
            raise GraphtierError(f"dataset {dataset.name!r} has no node features for a PyG feature store")
        n = features.shape[0]
        return FeatureTiers.from_table(features, replicated_end=0, interleaved_end=0, host_end=n), dataset.labels
    raise GraphtierError(f"expected a PreparedDataset or an AttachedDataset, got {type(dataset).__name__}")


def _graph(dataset: PreparedDataset | AttachedDataset) -> CSCGraph:
    if isinstance(dataset, (PreparedDataset, AttachedDataset)):
        return dataset.graph
    raise GraphtierError(f"expected a PreparedDataset or an AttachedDataset, got {type(dataset).__name__}")


class _RowBuffers:
    """Buffers for batches' feature rows (`batch.x`), each reused once nothing refers to it.

    A fresh buffer per batch cost more than the gather into it: the kernel faults in and zeroes
    every page of it, tens of MiB a batch on a large graph. A buffer is handed out again only when the
    array given to the last tensor over it is gone, which is when that tensor, every view of it
    and every tensor sharing its storage are gone: while the user keeps `batch.x` (or a view of
    it), its buffer is not touched. Up to `keep` buffers are kept; they are numpy's, so arrays of
    4 MiB or more are backed by transparent huge pages, and each row starts on a 64-byte boundary:
    numpy's large arrays start 16 bytes into a page, which left every 512 B row across 9 cache
    lines and the gather on cached stores (its streaming stores need rows on line boundaries)."""

    def __init__(self, keep: int = 3) -> None:
        self._keep = keep
        self._held: list[tuple[np.ndarray, weakref.ref]] = []  # (raw bytes, the array handed out)
        self._lock = threading.Lock()  # one store may serve loaders on several threads

    def take(self, count: int, row_shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """An uninitialised [count, *row_shape] tensor of `dtype`."""
        try:
            np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        except TypeError:  # bfloat16 and the like have no numpy dtype
            return torch.empty((count, *row_shape), dtype=dtype)
        nbytes = count * int(np.prod(row_shape, dtype=np.int64)) * np_dtype.itemsize
        with self._lock:
            return torch.from_numpy(self._rows(nbytes, count, row_shape, np_dtype))

    def _rows(self, nbytes: int, count: int, row_shape: tuple[int, ...], np_dtype: np.dtype) -> np.ndarray:
        need = nbytes + _ROW_ALIGN
        free = [i for i, (_, handed) in enumerate(self._held) if handed() is None]
        # A free buffer fits unless it is too small or over twice the size (a whole-table read
        # would otherwise stay held for the batches after it); those that do not fit are let go.
        fits = [i for i in free if need <= self._held[i][0].nbytes <= 2 * need]
        if fits:
            raw = self._held.pop(fits[0])[0]
        else:  # a new one, with room for the next batches' size changes
            self._held = [h for i, h in enumerate(self._held) if i not in free]
            raw = np.empty(need + nbytes // 8, dtype=np.uint8)
        skip = -raw.ctypes.data % _ROW_ALIGN
        rows = raw[skip : skip + nbytes].view(np_dtype).reshape(count, *row_shape)
        if len(self._held) < self._keep:
            self._held.append((raw, weakref.ref(rows)))
        return rows


class GraphtierFeatureStore(FeatureStore):
    """PyG's `FeatureStore` over a dataset's features `x` and labels `y`, read-only: every read of
    `x` is a tiered gather, counted in `traffic`.

    Args:
        dataset: A `PreparedDataset`, or inside a job its attached dataset.
        device_index: The device whose tiers the gather reads, inside a job.

    Raises:
        GraphtierError: A dataset without features.

    Attributes:
        traffic: Rows and bytes read from each tier so far.
    """

    def __init__(self, dataset: PreparedDataset | AttachedDataset, *, device_index: int = 0) -> None:
        super().__init__()
        self._tiers, self._labels = _tiers_and_labels(dataset, device_index)
        self._buffers = _RowBuffers()
        self.traffic = TrafficCounts(simulated=self._tiers.simulated)

    @property
    def num_nodes(self) -> int:
        """Rows of the dataset's features."""
        return self._tiers.num_rows

    def _ids(self, index: Any) -> Tensor:
        """The node ids an index selects: None or ':' for all, else a tensor, array, slice or int."""
        n = self.num_nodes
        if index is None:
            return torch.arange(n)
        if isinstance(index, slice):
            return torch.arange(n)[index]
        if isinstance(index, np.ndarray):
            index = torch.from_numpy(index)
        if isinstance(index, int) and not isinstance(index, bool):
            index = torch.tensor([index])
        if (
            not isinstance(index, Tensor)
            or index.dim() != 1
            or index.dtype.is_floating_point
            or index.dtype == torch.bool
        ):
            raise GraphtierError(f"node index must be a 1-D integer tensor, array, slice or int, got {index!r:.80}")
        ids = index.to(torch.int64)
        if ids.numel():  # numpy's one-threaded min/max: torch's pool spin-waits on a busy machine
            values = ids.numpy()
            lo, hi = int(values.min()), int(values.max())
            if lo < 0 or hi >= n:
                raise GraphtierError(f"node index holds ids outside [0, {n}): min {lo}, max {hi}")
        return ids

    def _check_attr(self, attr: TensorAttr) -> None:
        if attr.group_name is not None:
            raise KeyError(f"graphtier stores are homogeneous (group_name=None), got group {attr.group_name!r}")
        if attr.attr_name not in (FEATURES, LABELS) or (attr.attr_name == LABELS and self._labels is None):
            raise KeyError(
                f"no tensor {attr.attr_name!r}; this store holds {[a.attr_name for a in self.get_all_tensor_attrs()]}"
            )

    def _get_tensor(self, attr: TensorAttr) -> Tensor:
        self._check_attr(attr)
        ids = self._ids(attr.index)
        if attr.attr_name == LABELS:
            assert self._labels is not None  # _check_attr refuses labels where there are none
            return self._labels.index_select(0, ids)
        out = self._buffers.take(ids.numel(), self._tiers.row_shape, self._tiers.dtype)
        self.traffic = self.traffic + tiered_gather(ids, self._tiers, out)
        return out

    def _get_tensor_size(self, attr: TensorAttr) -> tuple[int, ...]:
        self._check_attr(attr)
        rows = self._ids(attr.index).numel() if attr.index is not None else self.num_nodes
        return (rows, *self._tiers.row_shape) if attr.attr_name == FEATURES else (rows,)

    def get_all_tensor_attrs(self) -> list[TensorAttr]:
        """The store's tensors: `x`, and `y` when the dataset has labels (group None)."""
        names = [FEATURES] + ([LABELS] if self._labels is not None else [])
        return [TensorAttr(group_name=None, attr_name=name) for name in names]

    def _put_tensor(self, tensor: Any, attr: TensorAttr) -> bool:
        raise GraphtierError("graphtier's feature store is read-only; prepare a dataset to change its features")

    def _remove_tensor(self, attr: TensorAttr) -> bool:
        raise GraphtierError("graphtier's feature store is read-only; prepare a dataset to change its features")


class GraphtierGraphStore(GraphStore):
    """PyG's `GraphStore` over a dataset's graph, read-only: its one edge type (`edge_type=None`) as
    `(row, colptr)` for layout 'csc', taken as it is, or `(row, col)` for 'coo'.

    Args:
        dataset: A `PreparedDataset`, or inside a job its attached dataset.
    """

    def __init__(self, dataset: PreparedDataset | AttachedDataset) -> None:
        super().__init__()
        self._graph = _graph(dataset)
        n = self._graph.num_nodes
        self._attr = EdgeAttr(edge_type=None, layout=EdgeLayout.CSC, is_sorted=True, size=(n, n))

    def _get_edge_index(self, edge_attr: EdgeAttr) -> tuple[Tensor, Tensor] | None:
        if edge_attr.edge_type is not None:
            return None
        if edge_attr.layout == EdgeLayout.CSC:
            return self._graph.row, self._graph.colptr
        if edge_attr.layout == EdgeLayout.COO:
            counts = self._graph.colptr[1:] - self._graph.colptr[:-1]
            col = torch.repeat_interleave(
                torch.arange(self._graph.num_nodes), counts, output_size=self._graph.num_edges
            )
            return self._graph.row, col
        return None

    def get_all_edge_attrs(self) -> list[EdgeAttr]:
        """The store's one edge type, in CSC layout."""
        return [self._attr]

    def _put_edge_index(self, edge_index: Any, edge_attr: EdgeAttr) -> bool:
        raise GraphtierError("graphtier's graph store is read-only; prepare a dataset to change its edges")

    def _remove_edge_index(self, edge_attr: EdgeAttr) -> bool:
        raise GraphtierError("graphtier's graph store is read-only; prepare a dataset to change its edges")


def stores(dataset: PreparedDataset | AttachedDataset) -> tuple[GraphtierFeatureStore, GraphtierGraphStore]:
    """The stores of a dataset, as PyG's loaders take them for `data`.

    Args:
        dataset: A `PreparedDataset` of one node type, or inside a job its attached dataset.

    Returns:
        `(GraphtierFeatureStore(dataset), GraphtierGraphStore(dataset))`.
    """
    return GraphtierFeatureStore(dataset), GraphtierGraphStore(dataset)
