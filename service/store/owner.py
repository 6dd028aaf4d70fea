"""`SharedDatasetStore`: loads a prepared dataset into shm segments it owns."""

from __future__ import annotations

import re

import torch

from graphtier.service.placement import PlacementPlan
from graphtier.service.prepared.dataset import PreparedDataset
from graphtier.service.prepared.npy_io import npy_data_offset
from graphtier.service.shm import SegmentOwner, SegmentRef
from graphtier.service.store.handle import SharedDatasetHandle, StorageTierRef


class SharedDatasetStore:
    """The one process-wide copy of a dataset; closing it unlinks every segment it made."""

    def __init__(self, dataset: PreparedDataset, plan: PlacementPlan, *, owner: SegmentOwner | None = None) -> None:
        if plan.num_nodes != dataset.manifest.num_nodes:
            from graphtier.service.errors import PlacementError

            raise PlacementError(
                f"plan is for {plan.num_nodes} nodes but dataset {dataset.name!r} has {dataset.manifest.num_nodes}"
            )
        self.dataset = dataset
        self.plan = plan
        self._own_owner = owner is None
        self.owner = owner or SegmentOwner()
        try:
            self.handle = self._load()
        except BaseException:
            self.close()
            raise
        finally:
            dataset.release()  # everything needed now lives in the segments or the storage-tier file

    def _copy(self, label: str, source: torch.Tensor) -> SegmentRef:
        # Segment labels allow [A-Za-z0-9_-] only; dataset names may also hold '.' and be longer.
        prefix = re.sub(r"[^A-Za-z0-9_-]", "_", self.dataset.name)[:40]
        segment, tensor = self.owner.create_tensor(f"{prefix}-{label}", tuple(source.shape), source.dtype)
        tensor.copy_(source)
        return segment.ref_for(tensor)

    def _load(self) -> SharedDatasetHandle:
        ds, plan = self.dataset, self.plan
        labels = self._copy("labels", ds.labels) if ds.labels is not None else None
        splits = {name: self._copy(f"{name}-ids", ds.split(name)) for name in ("train", "val", "test")}
        resident = storage = None
        features = ds.features
        if features is not None:
            if plan.host_end > 0:
                resident = self._copy("features", features[: plan.host_end])
            if plan.host_end < plan.num_nodes:
                path = ds.array_path("features")
                storage = StorageTierRef(
                    path=str(path),
                    offset_bytes=npy_data_offset(path) + plan.host_end * plan.row_bytes,
                    first_row=plan.host_end,
                    rows=plan.num_nodes - plan.host_end,
                    row_shape=tuple(features.shape[1:]),
                    dtype=str(features.numpy().dtype),
                )
        return SharedDatasetHandle(
            dataset=ds.name,
            plan=plan,
            colptr=self._copy("colptr", ds.array("colptr")),
            row=self._copy("row", ds.array("row")),
            labels=labels,
            splits=splits,
            resident_features=resident,
            storage_features=storage,
        )

    def close(self) -> None:
        if self._own_owner:
            self.owner.close()

    def __enter__(self) -> "SharedDatasetStore":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
