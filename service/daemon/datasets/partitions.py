"""`PartitionCopies`: the feature rows this node holds for partitioned jobs, and serving them to peers.

A partitioned job's part (graphtier.contract.partition) needs on this node only the replicated
rows and its own: `acquire` copies exactly those, read from the prepared `features.npy`, into
one sealed shared-memory segment (the replicated rows first, then this node's own in id order,
so a row's place is `FeaturePartition.local_index`). Parts of several jobs with the same split
of the same dataset version share one copy; it is unlinked when the last of them releases it.
The copy is what the node's producers gather from and what `FetchRows` serves to the job's
other nodes: read-only, only rows this node owns (a replicated row is never fetched: every
node holds it), only partitions a running part holds, and never a reply over the message limit.
A heterogeneous dataset's featured node types are split each on its own, from their `features.<type>.npy`
in type-local ids: one copy per type (`replicate` applies to each type's rows), fetched by naming
the type.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from graphtier.contract.errors import DaemonError, InvalidRequestError, ReplyTooLargeError, UnknownDatasetError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.view import JobPlacementInfo
from graphtier.contract.partition import MAX_FETCH_BYTES, MAX_FETCH_ROWS, FeaturePartition, replicated_rows
from graphtier.service.pipeline.peer_rows import PartitionedFeatures
from graphtier.service.prepared.dataset import PreparedDataset
from graphtier.service.prepared.digests import dataset_version
from graphtier.service.shm import SegmentOwner, SegmentRef

log = logging.getLogger("graphtierd")


@dataclass(frozen=True)
class FetchAccess:
    """How this node's producers reach the other nodes' FetchRows: the cluster's token and the
    certificate trusted for their TLS (None: plaintext, the daemon runs --insecure)."""

    token_file: Path
    ca_file: Path | None


@dataclass(frozen=True)
class PartitionKey:
    dataset: str
    version: str
    nnodes: int
    node_rank: int
    replicated_rows: int
    node_type: str = ""  # a heterogeneous dataset's node type; "": its one feature table

    def describe(self) -> str:
        of = f" {self.node_type} rows" if self.node_type else ""
        return (
            f"{self.dataset}@{self.version[:12]}{of} node {self.node_rank} of {self.nnodes}, "
            f"{self.replicated_rows} replicated rows"
        )


@dataclass
class PartitionCopy:
    """One node's rows of one split: the sealed segment and who uses it."""

    key: PartitionKey
    partition: FeaturePartition
    ref: SegmentRef
    rows: torch.Tensor  # [local_rows, row_bytes] uint8 view of the segment
    row_bytes: int
    owner: SegmentOwner
    seconds: float
    users: set[str] = field(default_factory=set)


class PartitionCopies:
    """Every partition copy of this daemon, keyed by dataset version and split."""

    def __init__(self, dataset_root: Path) -> None:
        self.dataset_root = dataset_root
        self._lock = threading.Lock()
        self._copies: dict[PartitionKey, PartitionCopy] = {}
        self._timers: list[threading.Timer] = []

    def acquire(
        self,
        job_id: str,
        dataset: str,
        version: str,
        *,
        nnodes: int,
        node_rank: int,
        replicate: str,
        node_type: str = "",
    ) -> PartitionCopy:
        """This node's copy for job `job_id` (made now unless another part holds the same one); of
        `node_type`'s rows for a heterogeneous dataset."""
        directory = self.dataset_root / dataset
        found = dataset_version(directory)
        if found is None:
            raise UnknownDatasetError(f"no prepared dataset {dataset!r} under {self.dataset_root}")
        if version and found != version:
            raise DaemonError(f"dataset {dataset!r} here is version {found[:16]}, the job trains on {version[:16]}")
        with self._lock:
            prepared = PreparedDataset.open(dataset, self.dataset_root)
            features = _feature_table(prepared, node_type)
            num_rows = int(features.shape[0])
            row_bytes = int(features[0].numel() * features.element_size()) if num_rows else 0
            replicated = replicated_rows(num_rows, replicate, row_bytes)
            key = PartitionKey(dataset, found, nnodes, node_rank, replicated, node_type)
            copy = self._copies.get(key)
            if copy is None:
                copy = self._make(key, prepared, features)
                self._copies[key] = copy
            copy.users.add(job_id)
            return copy

    def for_part(
        self,
        job_id: str,
        spec: JobSpec,
        placement: JobPlacementInfo | None,
        access: FetchAccess | None,
        node_types: Sequence[str] = (),
    ) -> PartitionedFeatures | dict[str, PartitionedFeatures] | None:
        """A partitioned job's part: this node's copy (made now, before any rank of any node can ask for
        it), as the part's producers find every row; for a heterogeneous dataset (`node_types`: its featured
        types) one copy per type, by type; None for replicated features."""
        if spec.features != "partitioned":
            return None
        if access is None:
            raise InvalidRequestError("job spec: features 'partitioned' needs a daemon in a cluster (--tcp and peers)")
        if placement is None or len(placement.node_addresses) != placement.nnodes:
            raise InvalidRequestError(
                f"job spec: features 'partitioned' needs a multi-node job whose placement lists "
                f"every node's address (got {placement!r:.200})"
            )
        hetero = {}
        for node_type in node_types or [""]:
            try:
                copy = self.acquire(
                    job_id,
                    spec.dataset,
                    placement.dataset_version,
                    nnodes=placement.nnodes,
                    node_rank=placement.node_rank,
                    replicate=spec.replicate,
                    node_type=node_type,
                )
            except BaseException:
                self.release(job_id)  # the types' copies made so far: the job does not start
                raise
            hetero[node_type] = PartitionedFeatures(
                partition=copy.partition,
                local=copy.ref,
                peers=list(placement.node_addresses),
                dataset=copy.key.dataset,
                version=copy.key.version,
                token_file=access.token_file,
                ca_file=access.ca_file,
                timeout_s=max(60.0, placement.peer_timeout_s),
                node_type=node_type or None,
            )
        return hetero if node_types else hetero[""]

    def _make(self, key: PartitionKey, prepared: PreparedDataset, features: torch.Tensor) -> PartitionCopy:
        t0 = time.perf_counter()
        partition = FeaturePartition(
            num_rows=int(features.shape[0]),
            replicated_rows=key.replicated_rows,
            nnodes=key.nnodes,
            node_rank=key.node_rank,
        )
        table = features
        row_bytes = int(table[0].numel() * table.element_size()) if table.shape[0] else 0
        owner = SegmentOwner()
        try:
            named = f"{key.dataset}-{key.node_type}" if key.node_type else key.dataset
            label = f"{re.sub(r'[^A-Za-z0-9_-]', '_', named)[:40]}-part{key.node_rank}of{key.nnodes}"
            segment, local = owner.create_tensor(label, (partition.local_rows, *table.shape[1:]), table.dtype)
            r = key.replicated_rows
            local[:r].copy_(table[:r])
            owned = torch.from_numpy(partition.owned_ids())
            step = 1 << 16  # in pieces: the file is read once, without a second full-size buffer
            for start in range(0, owned.numel(), step):
                part = owned[start : start + step]
                torch.index_select(table, 0, part, out=local[r + start : r + start + part.numel()])
            ref = segment.ref_for(local)
            segment.seal()
        except BaseException:
            owner.close()
            raise
        finally:
            prepared.release()
        seconds = time.perf_counter() - t0
        log.info(
            "partitioned features of %s: %s, %d bytes in shared memory (%.1f s)",
            key.describe(),
            partition.describe(),
            partition.local_rows * row_bytes,
            seconds,
        )
        rows = local.view(torch.uint8).reshape(partition.local_rows, row_bytes) if row_bytes else local
        return PartitionCopy(key, partition, ref, rows, row_bytes, owner, seconds)

    def release(self, job_id: str, *, after_s: float = 0.0) -> None:
        """Job `job_id` no longer uses its copy (after `after_s` seconds: its peers' producers may
        still be fetching their last batches); a copy nobody uses is unlinked."""
        if after_s > 0:
            timer = threading.Timer(after_s, self.release, args=(job_id,))
            timer.daemon = True
            with self._lock:
                self._timers = [t for t in self._timers if t.is_alive()] + [timer]
            timer.start()
            return
        with self._lock:
            for key, copy in list(self._copies.items()):
                copy.users.discard(job_id)
                if not copy.users:
                    del self._copies[key]
                    copy.owner.close()
                    log.info("unlinked the partitioned features of %s", key.describe())

    def held(self) -> list[PartitionCopy]:
        with self._lock:
            return list(self._copies.values())

    def fetch(self, key: PartitionKey, rows: np.ndarray) -> tuple[int, bytes]:
        """(row_bytes, the rows' bytes in the order asked) for a peer; refused with a clear error."""
        with self._lock:
            copy = self._copies.get(key)
            if copy is None:
                held = "; ".join(c.key.describe() for c in self._copies.values()) or "none"
                raise UnknownDatasetError(f"this node holds no partition {key.describe()} (held: {held})")
        ids = np.asarray(rows, dtype=np.int64)
        most = min(MAX_FETCH_ROWS, MAX_FETCH_BYTES // max(1, copy.row_bytes))
        if ids.size > most:
            raise ReplyTooLargeError(
                f"{ids.size} rows of {copy.row_bytes} bytes exceed the reply limit "
                f"({MAX_FETCH_ROWS} rows, {MAX_FETCH_BYTES} bytes): ask for at most {most} rows "
                "per call"
            )
        p = copy.partition
        if ids.size:
            bad = (ids < 0) | (ids >= p.num_rows) | (p.owner(ids) != p.node_rank)
            if bad.any():
                first = int(ids[int(np.argmax(bad))])
                why = (
                    "out of range"
                    if not 0 <= first < p.num_rows
                    else "replicated on every node: never fetched"
                    if first < p.replicated_rows
                    else f"owned by node {int(p.owner(np.array([first]))[0])}"
                )
                raise InvalidRequestError(
                    f"row {first} is not this node's to serve ({why}); node {p.node_rank} of "
                    f"{p.nnodes} owns rows r >= {p.replicated_rows} with "
                    f"(r - {p.replicated_rows}) % {p.nnodes} == {p.node_rank}"
                )
        out = torch.empty((ids.size, copy.row_bytes), dtype=torch.uint8)
        torch.index_select(copy.rows, 0, torch.from_numpy(p.local_index(ids)), out=out)
        return copy.row_bytes, out.numpy().tobytes()

    def close(self) -> None:
        """Unlink every copy now (the daemon is stopping: its jobs have ended)."""
        with self._lock:
            for timer in self._timers:
                timer.cancel()
            for copy in self._copies.values():
                copy.owner.close()
            self._copies.clear()


def _feature_table(prepared: PreparedDataset, node_type: str) -> torch.Tensor:
    """The rows to partition: the dataset's feature table, or a heterogeneous dataset's rows of `node_type`;
    DaemonError naming what is missing."""
    schema = prepared.manifest.hetero
    if not node_type:
        if schema is not None:
            raise DaemonError(f"dataset {prepared.name!r} is heterogeneous: its rows are partitioned per node type")
        if prepared.features is None:
            raise DaemonError(f"dataset {prepared.name!r} has no features to partition")
        return prepared.features
    featured = {t.name: t.feature_array for t in schema.node_types if t.feature_array} if schema is not None else {}
    if node_type not in featured:
        raise DaemonError(
            f"dataset {prepared.name!r} has no feature rows of node type {node_type!r} to partition "
            f"(featured types: {', '.join(featured) or 'none'})"
        )
    return prepared.array(featured[node_type])
