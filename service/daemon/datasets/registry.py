"""`DatasetRegistry`: the daemon's loaded datasets, one shared-memory copy each per machine.

Loading opens a prepared dataset under the daemon's root, turns the requested budgets into
a `PlacementPlan` and copies the dataset into a `SharedDatasetStore`. Every job shares that
copy: loading a loaded dataset again returns the same layout when the plan is the same,
and is refused when it differs (one copy cannot have two placements).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from graphtier.contract.datasets import BudgetSpec, DatasetSummary, TierBytes, UnloadResult
from graphtier.contract.errors import (
    DatasetConflictError,
    DatasetInUseError,
    InvalidRequestError,
    PreparedDatasetError,
    SharedMemoryError,
    UnknownDatasetError,
)
from graphtier.service.daemon.datasets.gpu_placement import GpuPlacement
from graphtier.service.daemon.datasets.lifetime import (
    LifetimePolicy,
    file_identity,
    manifest_version,
    over_budget,
    resident_estimate,
)
from graphtier.service.placement import PlacementPlan, TierBudgets, TierSize
from graphtier.service.prepared import DatasetManifest, PreparedDataset, list_datasets
from graphtier.service.prepared.catalog import validate_name
from graphtier.service.prepared.manifest import content_version
from graphtier.service.shm.naming import validate_label
from graphtier.service.store import SharedDatasetStore
from graphtier.service.store.handle import SharedDatasetHandle
from graphtier.service.store.wire import DatasetLayoutInfo, LoadResult
from graphtier.service.tiering.hetero import featured_bytes, hetero_plans

if TYPE_CHECKING:
    from graphtier.service.store.device_tiers import DeviceStructureSet

log = logging.getLogger("graphtier.daemon")

_LONGEST_LABEL_SUFFIX = "-train-ids"  # the store labels segments "<dataset>-<what>"


def feature_bytes(manifest: DatasetManifest) -> int:
    """Bytes of the feature rows: the features array, or a heterogeneous dataset's rows of every featured type."""
    if manifest.hetero is not None:
        return featured_bytes(manifest.hetero)
    info = manifest.arrays.get("features")
    return info.nbytes if info is not None else 0


def structure_bytes(manifest: DatasetManifest) -> int:
    return sum(manifest.arrays[key].nbytes for key in ("colptr", "row") if key in manifest.arrays)


@dataclass
class LoadedDataset:
    """One dataset in the daemon's tiers: its store (which owns the segments) and how it was asked for."""

    store: SharedDatasetStore
    manifest: DatasetManifest
    budgets: BudgetSpec
    loaded_at: datetime
    asked_plan: PlacementPlan  # before the GPU decision (which may move interleaved rows to host)
    version: str  # manifest_version of what was loaded
    storage_identity: tuple[int, ...] | None = None  # file_identity of the storage tier's file, if it has rows there
    last_used: float = 0.0  # time.monotonic() of the last load, layout or job on it
    structure_tier: DeviceStructureSet | None = None  # the device structure tier on the tier GPUs

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def handle(self) -> SharedDatasetHandle:
        """The store's handle, with the device structure tier's allocations among the device tiers."""
        handle = self.store.handle
        if self.structure_tier is None or not self.structure_tier.refs:
            return handle
        return handle.model_copy(update={"device_tiers": (*handle.device_tiers, *self.structure_tier.refs)})

    def close(self) -> None:
        """Free the device structure tier, then the store's segments and device tiers."""
        try:
            if self.structure_tier is not None:
                self.structure_tier.close()
                self.structure_tier = None
        finally:
            self.store.close()

    @property
    def plan(self) -> PlacementPlan:
        return self.store.plan

    @property
    def resident_bytes(self) -> int:
        return sum(segment.nbytes for segment in self.store.owner.segments.values())

    def layout(self) -> DatasetLayoutInfo:
        plan = self.plan
        sizes = plan.tier_sizes(num_edges=self.manifest.num_edges)
        device_bytes = plan.device_bytes_per_device()
        hetero = list((self.store.hetero_plans or {}).values())
        if (
            hetero
        ):  # a heterogeneous dataset's feature rows are placed per type (its plan holds structure): summed over types
            per_type = [p.tier_sizes() for p in hetero]
            for name in ("device_replicated", "device_interleaved", "host", "storage"):
                sizes[name] = TierSize(sum(t[name].rows for t in per_type), sum(t[name].bytes for t in per_type))
            device_bytes += sum(p.device_bytes_per_device() for p in hetero)
        return DatasetLayoutInfo(
            handle=self.handle,
            tier_sizes=[TierBytes(tier=name, rows=size.rows, bytes=size.bytes) for name, size in sizes.items()],
            num_edges=self.manifest.num_edges,
            feature_dim=self.manifest.feature_dim,
            num_classes=self.manifest.num_classes,
            feature_bytes=feature_bytes(self.manifest),
            structure_bytes=structure_bytes(self.manifest),
            device_bytes_per_device=device_bytes,
            simulated_devices=self.store.simulated_devices,
            owner_pid=os.getpid(),
            loaded_at=self.loaded_at,
            budgets=self.budgets,
            version=content_version(self.manifest),
        )


def _summary(manifest: DatasetManifest, *, loaded: LoadedDataset | None, job_ids: list[str]) -> DatasetSummary:
    return DatasetSummary(
        name=manifest.name,
        loaded=loaded is not None,
        num_nodes=manifest.num_nodes,
        num_edges=manifest.num_edges,
        feature_dim=manifest.feature_dim,
        num_classes=manifest.num_classes,
        feature_bytes=feature_bytes(manifest),
        structure_bytes=structure_bytes(manifest),
        resident_bytes=loaded.resident_bytes if loaded is not None else 0,
        job_ids=job_ids,
        source=manifest.source,
    )


class DatasetRegistry:
    """Loaded datasets by name. `users(name)` lists the unfinished jobs on a dataset and
    `cancel(job_ids, reason)` cancels jobs (both from the job table)."""

    def __init__(
        self,
        root: Path,
        *,
        users: Callable[[str], list[str]] = lambda name: [],
        cancel: Callable[[list[str], str], None] = lambda job_ids, reason: None,
        gpus: GpuPlacement | None = None,
        policy: LifetimePolicy | None = None,
    ) -> None:
        self.root = Path(root)
        self.gpus = gpus or GpuPlacement()
        self.policy = policy or LifetimePolicy()
        self._retired: list[LoadedDataset] = []  # stale versions kept while jobs may still read them
        self._users = users
        self._cancel = cancel
        self._lock = threading.RLock()  # loads are serialised: two jobs asking at once get one copy
        self._loaded: dict[str, LoadedDataset] = {}

    def _open(self, name: str) -> PreparedDataset:
        self._check_name(name)
        if not (self.root / name / "manifest.json").is_file():
            raise UnknownDatasetError(
                f"no prepared dataset {name!r} under the daemon's dataset root {self.root}; prepare it with "
                f"`graphtier dataset prepare ... --name {name} --out {self.root}`"
            )
        dataset = PreparedDataset.open(name, self.root)
        if dataset.manifest.name != name:  # a copied or renamed directory: the name would mean two things
            raise InvalidRequestError(
                f"directory {self.root / name} holds dataset {dataset.manifest.name!r} (its manifest's name), not "
                f"{name!r}; rename the directory back, or prepare the dataset under the name {name!r}"
            )
        return dataset

    @staticmethod
    def _check_name(name: str) -> None:
        """InvalidRequestError unless `name` may name a dataset here (before it touches a path)."""
        try:
            validate_name(name)
        except PreparedDatasetError as exc:
            raise InvalidRequestError(str(exc)) from None
        try:
            validate_label(name + _LONGEST_LABEL_SUFFIX)
        except SharedMemoryError:
            raise InvalidRequestError(
                f"dataset name {name!r} cannot label shared-memory segments: use at most "
                f"{64 - len(_LONGEST_LABEL_SUFFIX)} letters, digits, '_' or '-' (prepare it under such a name)"
            ) from None

    @staticmethod
    def _tier_budgets(budgets: BudgetSpec, dataset: PreparedDataset) -> TierBudgets:
        manifest = dataset.manifest  # percentages are of all feature bytes, a heterogeneous dataset's over every type
        return TierBudgets.parse(
            feature_bytes=feature_bytes(manifest),
            structure_bytes=structure_bytes(manifest),
            num_devices=budgets.num_devices,
            device_replicated=budgets.device_replicated or 0,
            device_interleaved=budgets.device_interleaved or 0,
            host=None if budgets.host is None else (budgets.host or 0),
            structure_device=budgets.structure_device or 0,
        )

    @classmethod
    def _plan(cls, budgets: BudgetSpec, dataset: PreparedDataset) -> PlacementPlan:
        manifest = dataset.manifest
        tier_budgets = cls._tier_budgets(budgets, dataset)
        colptr = dataset.array("colptr") if tier_budgets.structure_device_bytes else None
        if manifest.hetero is not None:  # feature rows are placed per type (_hetero_plans); this plan holds structure
            structure_only = tier_budgets.model_copy(
                update={"device_replicated_bytes": 0, "device_interleaved_bytes": 0, "host_bytes": None}
            )
            return PlacementPlan.from_budgets(structure_only, num_nodes=manifest.num_nodes, row_bytes=0, colptr=colptr)
        row_bytes = feature_bytes(manifest) // manifest.num_nodes
        return PlacementPlan.from_budgets(
            tier_budgets, num_nodes=manifest.num_nodes, row_bytes=row_bytes, colptr=colptr
        )

    @classmethod
    def _hetero_plans(cls, budgets: BudgetSpec, dataset: PreparedDataset) -> dict[str, PlacementPlan] | None:
        """A heterogeneous dataset's plan per featured node type: the one byte budget of each tier split across
        types by score, as `dataset tiering-report` splits it; None for a homogeneous dataset."""
        schema = dataset.manifest.hetero
        if schema is None:
            return None
        return hetero_plans(schema, dataset.scores, cls._tier_budgets(budgets, dataset))

    def _current(self, name: str) -> LoadedDataset | None:
        """The loaded copy of `name` if it is still the version on disk; a stale copy is retired
        (kept for the jobs that may read it, never handed out again). Call with the lock held."""
        loaded = self._loaded.get(name)
        if loaded is None:
            return None
        on_disk = manifest_version(self.root / name)
        storage = loaded.store.handle.storage_features
        if on_disk == loaded.version and (
            storage is None or file_identity(Path(storage.path)) == loaded.storage_identity
        ):
            return loaded
        del self._loaded[name]
        self._retired.append(loaded)
        what = (
            "was removed"
            if on_disk is None
            else f"changed on disk (version {loaded.version} -> {on_disk})"
            if on_disk != loaded.version
            else "has its storage-tier file changed since it was verified"
        )
        log.warning(
            "dataset %s %s: new jobs get %s; the loaded copy stays until no job uses it",
            name,
            what,
            "an error" if on_disk is None else "the new version",
        )
        return None

    def _make_room(self, name: str, need: int) -> None:
        """Unload idle copies, least recently used first, until `need` more bytes fit the budget."""
        budget = self.policy.shm_budget_bytes
        if budget is None:
            return

        def held() -> int:
            return sum(d.resident_bytes for d in (*self._loaded.values(), *self._retired))

        self.sweep()
        idle = sorted((d for d in self._loaded.values() if not self._users(d.name)), key=lambda d: d.last_used)
        while held() + need > budget and idle:
            victim = idle.pop(0)
            log.info(
                "unloading idle dataset %s to make room for %s (shared-memory budget %d bytes)",
                victim.name,
                name,
                budget,
            )
            del self._loaded[victim.name]
            victim.close()
        if held() + need > budget:
            raise over_budget(name, need, held(), budget, sorted(self._loaded))

    def sweep(self, now: float | None = None) -> list[str]:
        """Close retired copies no job uses, and idle copies past `idle_unload_s`; their names."""
        now = time.monotonic() if now is None else now
        closed = []
        with self._lock:
            for old in [d for d in self._retired if not self._users(d.name)]:
                self._retired.remove(old)
                old.close()
                closed.append(f"{old.name}@{old.version}")
            for loaded in list(self._loaded.values()):
                if self._users(loaded.name):
                    loaded.last_used = now
                elif self.policy.idle_unload_s and now - loaded.last_used > self.policy.idle_unload_s:
                    del self._loaded[loaded.name]
                    loaded.close()
                    closed.append(loaded.name)
        for name in closed:
            log.info("unloaded %s (%s)", name, "retired version" if "@" in name else "idle")
        return closed

    def load(self, name: str, budgets: BudgetSpec | None = None) -> LoadResult:
        """Load `name` with `budgets` (default: all in host memory), or return the loaded copy. A copy
        placed by other budgets is unloaded and loaded again when no job uses it; while jobs use it,
        DatasetConflictError names them and the ways on (every job shares one copy)."""
        budgets = budgets or BudgetSpec()
        with self._lock:
            loaded = self._current(name)
            if loaded is not None and (
                self._plan(budgets, loaded.store.dataset) != loaded.asked_plan
                or self._hetero_plans(budgets, loaded.store.dataset) != loaded.store.hetero_plans
            ):
                users = self._users(name)
                if users:
                    raise DatasetConflictError(
                        f"dataset {name!r} is already loaded with another placement (budgets "
                        f"{loaded.budgets.model_dump(exclude_none=True)}) and job(s) {', '.join(users)} use it; "
                        "every job shares one copy: use the same budgets (or none, to share it as placed), or "
                        "wait for those jobs to end (or cancel them): a copy no job uses is reloaded with the "
                        "new budgets"
                    )
                log.info(
                    "reloading dataset %s: no job uses it, and budgets %s place it otherwise than %s",
                    name,
                    budgets.model_dump(exclude_none=True),
                    loaded.budgets.model_dump(exclude_none=True),
                )
                del self._loaded[name]
                loaded.store.close()
                loaded = None
            if loaded is not None:
                loaded.last_used = time.monotonic()
                return LoadResult(layout=loaded.layout(), already_loaded=True)
            self._check_name(name)
            version = manifest_version(self.root / name)  # before opening: a swap after it is seen next time
            dataset = self._open(name)
            features = dataset.array_path("features") if dataset.has("features") else None
            storage_identity = file_identity(features) if features else None  # before the check: a later write shows
            asked = self._plan(budgets, dataset)
            hetero = self._hetero_plans(budgets, dataset)
            decision = self.gpus.decide(asked, name)
            self._make_room(name, resident_estimate(dataset.manifest, decision.plan, hetero))
            t0 = time.perf_counter()
            store = SharedDatasetStore(
                dataset,
                decision.plan,
                hetero_plans=hetero,
                devices=decision.devices,
                placement_notes=decision.notes,
                device_memory=self.gpus.device_memory,
                fd_exporter=self.gpus.fd_exporter(),
            )
            try:
                structure_tier = self._place_structure(store, decision.devices)
            except BaseException:
                store.close()
                raise
            log.info(
                "loaded dataset %s in %.2f s (checksums of every served array verified, %.2f s of it)",
                name,
                time.perf_counter() - t0,
                store.verify_seconds,
            )
            loaded = LoadedDataset(
                store=store,
                manifest=dataset.manifest,
                budgets=budgets,
                loaded_at=datetime.now(timezone.utc),
                asked_plan=asked,
                version=version or "unknown",
                last_used=time.monotonic(),
                storage_identity=storage_identity if store.handle.storage_features is not None else None,
                structure_tier=structure_tier,
            )
            self._loaded[name] = loaded
            return LoadResult(layout=loaded.layout(), already_loaded=False)

    def _place_structure(self, store: SharedDatasetStore, devices: tuple[int, ...]) -> DeviceStructureSet | None:
        """The plan's device structure tier on `devices`, filled from the store's verified CSC
        segments; None when there is none to place (no GPUs, or no structure budget)."""
        plan = store.plan
        if not devices or not plan.structure_device_end:
            return None
        from graphtier.service.shm import attach_tensor
        from graphtier.service.store.device_tiers import DeviceStructureSet  # CUDA only when asked for

        handle = store.handle
        colptr, row = attach_tensor(handle.colptr), attach_tensor(handle.row)
        return DeviceStructureSet(
            plan,
            colptr,
            row,
            devices,
            handle.dataset,
            mode=self.gpus.device_memory,
            exporter=store.fd_exporter,  # the daemon's, or the one a store placed on GPUs serves itself
        )

    def get(self, name: str) -> LoadedDataset:
        with self._lock:
            loaded = self._loaded.get(name)
            if loaded is None:
                names = ", ".join(sorted(self._loaded)) or "none"
                raise UnknownDatasetError(f"dataset {name!r} is not loaded in this daemon (loaded: {names})")
            return loaded

    def layout(self, name: str) -> DatasetLayoutInfo:
        """The layout of the loaded copy of `name`; a stale copy is replaced by the version on disk
        (loaded with the same budgets), and a removed dataset is an UnknownDatasetError."""
        with self._lock:
            loaded = self._loaded.get(name)
            if loaded is None:
                return self.get(name).layout()  # UnknownDatasetError naming what is loaded
            if self._current(name) is None:
                return self.load(name, loaded.budgets).layout
            loaded.last_used = time.monotonic()
            return loaded.layout()

    def loaded(self) -> list[LoadedDataset]:
        with self._lock:
            return [self._loaded[name] for name in sorted(self._loaded)]

    def unload(self, name: str, *, force: bool = False) -> UnloadResult:
        """Unlink the dataset's segments; refused while jobs use it unless `force` (they are cancelled)."""
        with self._lock:
            loaded = self.get(name)
            users = self._users(name)
            if users and not force:
                raise DatasetInUseError(
                    f"dataset {name!r} is used by job(s) {', '.join(users)}; cancel them first or unload with force"
                )
            if users:
                self._cancel(users, f"dataset {name!r} was unloaded")
            released = loaded.resident_bytes
            del self._loaded[name]
            loaded.close()
            log.info("unloaded %s (asked)", name)
            return UnloadResult(released_bytes=released, cancelled_job_ids=users)

    def summaries(self, *, include_prepared: bool = False) -> list[DatasetSummary]:
        """Loaded datasets, and with `include_prepared` every prepared one under the root; sorted by name."""
        with self._lock:
            rows = {
                name: _summary(loaded.manifest, loaded=loaded, job_ids=self._users(name))
                for name, loaded in self._loaded.items()
            }
        if include_prepared:
            for manifest in list_datasets(self.root):
                rows.setdefault(manifest.name, _summary(manifest, loaded=None, job_ids=self._users(manifest.name)))
        return [rows[name] for name in sorted(rows)]

    def close(self) -> list[str]:
        """Unload every dataset (the daemon is stopping); returns their names."""
        with self._lock:
            names = sorted(self._loaded)
            for name in names:
                self._loaded.pop(name).close()
            for old in self._retired:
                old.close()
            self._retired.clear()
            self.gpus.close()
            return names
