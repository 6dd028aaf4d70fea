"""Where a producer's feature rows come from: one `FeatureSource`, chosen once when it starts.

- `LocalTiers`: the dataset's tiers (device, host, storage read on demand or mapped);
- `WindowedTiers`: the same tiers, the storage rows read ahead through the look-ahead window
  (graphtier.service.storage.window), each batch's reads started when it is sampled;
- `PeerRowSource`: a partitioned job's rows, this node's copy plus the rows fetched from the
  other nodes' daemons (peer_rows.py), the fetches started when the batch is sampled;
- `CudaTiers`: for device slots, the tiered gather on the producer's GPU straight into the slot
  (device tiers from the daemon's handles, host tier zero-copy, storage rows staged through a
  pinned buffer, read into it by the dataset's `StorageReader` under `--storage-reads direct` or
  `page-cache`, copied out of the file mapping under `mmap`: graphtier.service.gpu.gather);
- `StagedToDevice`: for device slots fed by the look-ahead window or other nodes, any of the
  host sources above filling a pinned buffer that is copied into the slot on the producer's stream.

Each one starts a sampled batch's reads (`admit`), fills the batch's rows into its slot
(`fill`) and writes its counters into the control block (`count`), so the producer never
asks which one it has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from graphtier.contract.storage import StorageCounters
from graphtier.service.gather import FeatureTiers, TrafficCounts
from graphtier.service.gather.tiered_gather import gather_split
from graphtier.service.pipeline.control import ControlBlock
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.peer_rows import PartitionedFeatures, PeerRows, RemoteTicket
from graphtier.service.storage import LookaheadWindow, RowReader, StorageReads, Ticket
from graphtier.service.store import AttachedDataset

PARTITION_LOOKAHEAD = 2  # batches sampled ahead by a partitioned job's producer: their fetches overlap

Admitted = Ticket | RemoteTicket | None  # what `admit` started for one batch


class FeatureSource(ABC):
    """Fills each batch's feature rows into its slot and counts them; see the module docstring."""

    def __init__(self, tiers: FeatureTiers, *, storage_reads: StorageReads, window: int, depth: int) -> None:
        self.tiers = tiers
        self.depth = depth  # batches to sample ahead of the one being gathered
        self.storage_reads = storage_reads
        self.storage = StorageCounters(mode=storage_reads, window=window)

    @property
    def simulated(self) -> bool:
        """True when the device tiers' rows are read from their host copy (accounted, not moved)."""
        return self.tiers.simulated

    def admit(self, node_ids: torch.Tensor) -> Admitted:
        """Start the reads of a batch just sampled; what it returns comes back to `fill` and `count`."""
        return None

    @abstractmethod
    def fill(self, node_ids: torch.Tensor, admitted: Admitted, out: torch.Tensor) -> TrafficCounts:
        """The rows of `node_ids` into out[:len(node_ids)]; the rows served from each tier."""

    def count(self, control: ControlBlock, traffic: TrafficCounts, admitted: Admitted, sampled_ahead: int) -> None:
        """This batch's reads added to the counters in the control block (per-batch traffic aside)."""
        self._count_storage(
            control, traffic, hits=0, reader=self.tiers.storage_reader, cached_rows=0, sampled_ahead=sampled_ahead
        )

    def close(self) -> None:  # noqa: B027 -- a default, not abstract: a source that holds nothing has nothing to stop
        """Stop whatever reads or connections the source holds; idempotent."""

    def _count_storage(
        self,
        control: ControlBlock,
        traffic: TrafficCounts,
        *,
        hits: int,
        reader: RowReader | None,
        cached_rows: int,
        sampled_ahead: int,
    ) -> None:
        """Storage rows of this batch: read for it, or served by the window (`hits`); the reader's costs so far."""
        read_rows = traffic.storage.rows - hits
        s, row_bytes = self.storage, self.tiers.row_bytes
        if reader is None:  # mmap without a window: the gather copied the rows out of the mapping
            read_bytes, requests, io_s, request_s, read_s = s.read_bytes + read_rows * row_bytes, 0, 0.0, 0.0, 0.0
        else:
            r = reader.stats
            read_bytes, requests, io_s, request_s, read_s = (
                r.bytes_read,
                r.requests,
                r.io_seconds,
                r.request_seconds,
                r.seconds,
            )
        self.storage = StorageCounters(
            mode=s.mode,
            window=s.window,
            read_rows=s.read_rows + read_rows,
            read_bytes=read_bytes,
            read_row_bytes=s.read_row_bytes + read_rows * row_bytes,
            requests=requests,
            window_rows=s.window_rows + hits,
            window_bytes=s.window_bytes + hits * row_bytes,
            io_seconds=io_s,
            request_seconds=request_s,
            read_seconds=read_s,
            lookahead_batches=sampled_ahead,
            window_cached_rows=cached_rows,
        )
        control.header.set_storage(self.storage)


class LocalTiers(FeatureSource):
    """The dataset's tiers, storage rows read (or copied from the mapping) when the batch is gathered."""

    def __init__(
        self,
        dataset: AttachedDataset,
        tiers: FeatureTiers,
        *,
        device_index: int,
        storage_reads: StorageReads,
        window: int,
    ) -> None:
        super().__init__(tiers, storage_reads=storage_reads, window=window, depth=window)
        self.dataset, self.device_index = dataset, device_index

    def fill(self, node_ids: torch.Tensor, admitted: Admitted, out: torch.Tensor) -> TrafficCounts:
        return self.dataset.gather(node_ids, out, device_index=self.device_index)


class WindowedTiers(FeatureSource):
    """The dataset's tiers, storage rows read ahead through the look-ahead window."""

    def __init__(
        self,
        tiers: FeatureTiers,
        reader: RowReader,
        *,
        storage_reads: StorageReads,
        window: int,
        window_bytes: int | None = None,
    ) -> None:
        """`window_bytes`: the most the window's row cache may hold (None: unbounded)."""
        super().__init__(tiers, storage_reads=storage_reads, window=window, depth=window)
        capacity = None if window_bytes is None else window_bytes // max(1, tiers.row_bytes)
        self.window: LookaheadWindow | None = LookaheadWindow(reader, row_bytes=tiers.row_bytes, capacity_rows=capacity)

    def _open(self) -> LookaheadWindow:
        if self.window is None:
            raise ChannelError("the look-ahead window of this producer is closed")
        return self.window

    def admit(self, node_ids: torch.Tensor) -> Ticket:
        host_end = self.tiers.host_end
        return self._open().admit((node_ids[node_ids >= host_end] - host_end).numpy())

    def fill(self, node_ids: torch.Tensor, admitted: Admitted, out: torch.Tensor) -> TrafficCounts:
        assert isinstance(admitted, Ticket)  # every batch is admitted when it is sampled
        window = self._open()
        return gather_split(node_ids, self.tiers, out, lambda rows, rows_out: window.fill(admitted, rows, rows_out))

    def count(self, control: ControlBlock, traffic: TrafficCounts, admitted: Admitted, sampled_ahead: int) -> None:
        window = self._open()
        hits = admitted.hits if isinstance(admitted, Ticket) else 0
        self._count_storage(
            control,
            traffic,
            hits=hits,
            reader=window.reader,
            cached_rows=window.cached_rows,
            sampled_ahead=sampled_ahead,
        )

    def close(self) -> None:
        if self.window is not None:
            self.window.close()
            self.window = None


class PeerRowSource(FeatureSource):
    """A partitioned job's rows: this node's copy, the others fetched from their owners' daemons."""

    def __init__(
        self, partition: PartitionedFeatures, tiers: FeatureTiers, *, storage_reads: StorageReads, window: int
    ) -> None:
        super().__init__(tiers, storage_reads=storage_reads, window=window, depth=max(window, PARTITION_LOOKAHEAD))
        self.rows: PeerRows | None = PeerRows(partition, row_shape=tiers.row_shape, dtype=tiers.dtype)

    def _open(self) -> PeerRows:
        if self.rows is None:
            raise ChannelError("the connections of this producer to the other nodes are closed")
        return self.rows

    def admit(self, node_ids: torch.Tensor) -> RemoteTicket:
        return self._open().admit(node_ids)

    def fill(self, node_ids: torch.Tensor, admitted: Admitted, out: torch.Tensor) -> TrafficCounts:
        assert isinstance(admitted, RemoteTicket)  # every batch is admitted when it is sampled
        return self._open().fill(admitted, node_ids, out)

    def count(self, control: ControlBlock, traffic: TrafficCounts, admitted: Admitted, sampled_ahead: int) -> None:
        """The network tier's counters so far (per peer by node rank), then the storage counters."""
        rows, h = self._open(), control.header
        h.array("peer_rows")[: rows.peer_rows.size] = rows.peer_rows
        h.array("peer_bytes")[: rows.peer_bytes.size] = rows.peer_bytes
        h.array("peer_requests")[: rows.peer_requests.size] = rows.peer_requests
        h["network_fetch_ns"], h["network_wait_ns"] = rows.fetch_ns, rows.wait_ns
        super().count(control, traffic, admitted, sampled_ahead)

    def close(self) -> None:
        if self.rows is not None:
            self.rows.close()
            self.rows = None


class CudaTiers(FeatureSource):
    """The dataset's tiers read by the producer's GPU, gathered straight into a device slot.

    `tiers` (the host view of the same placement) sizes the rows and names the storage reader;
    the gather itself is `CudaGather` over the tiers this process mapped on GPU `device`, its
    storage rows read by that reader into the pinned staging buffer (None in `mmap` mode: copied
    out of the file mapping)."""

    def __init__(
        self,
        dataset: AttachedDataset,
        tiers: FeatureTiers,
        *,
        device: int,
        storage_reads: StorageReads,
        sm_share: float | None = None,
    ) -> None:
        """`sm_share`: the producer's share of the SMs when it is not under MPS (the gather's grid
        keeps to it); None: the gather's default cap on host reads only."""
        super().__init__(tiers, storage_reads=storage_reads, window=0, depth=0)
        from graphtier.service.gpu.gather import CudaGather  # CUDA only for device slots

        cuda_tiers = dataset.cuda_tiers(device).tiers
        assert cuda_tiers is not None  # set by open_cuda_tiers
        self.gather = CudaGather(cuda_tiers, sm_share=sm_share, storage_reader=tiers.storage_reader)

    @property
    def simulated(self) -> bool:
        return False  # every row is read where it lives (unplaced device tiers count as host rows)

    def fill(self, node_ids: torch.Tensor, admitted: Admitted, out: torch.Tensor) -> TrafficCounts:
        return self.gather.gather(node_ids, out)

    def count(self, control: ControlBlock, traffic: TrafficCounts, admitted: Admitted, sampled_ahead: int) -> None:
        """The staged storage rows: read by the storage reader (its requests and bytes so far), or in
        mmap mode copied out of the file mapping (their bytes)."""
        self._count_storage(
            control, traffic, hits=0, reader=self.tiers.storage_reader, cached_rows=0, sampled_ahead=sampled_ahead
        )


class StagedToDevice(FeatureSource):
    """A host source whose rows reach a device slot through one pinned buffer per producer: filled on
    the CPU, copied on the producer's current stream (the next fill waits for that copy)."""

    def __init__(self, host: FeatureSource) -> None:
        super().__init__(host.tiers, storage_reads=host.storage_reads, window=host.storage.window, depth=host.depth)
        self.host = host
        self._staging: torch.Tensor | None = None
        self._copied: torch.cuda.Event | None = None

    @property
    def simulated(self) -> bool:
        return self.host.simulated

    def admit(self, node_ids: torch.Tensor) -> Admitted:
        return self.host.admit(node_ids)

    def fill(self, node_ids: torch.Tensor, admitted: Admitted, out: torch.Tensor) -> TrafficCounts:
        n = node_ids.numel()
        if self._copied is not None:
            self._copied.synchronize()  # the last batch's copy has read the buffer
        if self._staging is None or self._staging.shape[0] < n:
            rows = max(n, 1024, 0 if self._staging is None else 2 * self._staging.shape[0])
            self._staging = torch.empty((rows, *out.shape[1:]), dtype=out.dtype, pin_memory=True)
        traffic = self.host.fill(node_ids, admitted, self._staging[:n])
        out[:n].copy_(self._staging[:n], non_blocking=True)
        self._copied = torch.cuda.Event()
        self._copied.record(torch.cuda.current_stream(out.device))
        return traffic

    def count(self, control: ControlBlock, traffic: TrafficCounts, admitted: Admitted, sampled_ahead: int) -> None:
        self.host.count(control, traffic, admitted, sampled_ahead)

    def close(self) -> None:
        self.host.close()


def feature_source(
    dataset: AttachedDataset,
    tiers: FeatureTiers,
    *,
    device_index: int,
    storage_reads: StorageReads,
    window: int,
    partition: PartitionedFeatures | None,
    window_bytes: int | None = None,
    slot_device: int | None = None,
    sm_share: float | None = None,
) -> FeatureSource:
    """The one source for a producer's configuration: peer rows for a partitioned job, the look-ahead
    window when `window` > 0 and the dataset has storage rows to read (its row cache at most `window_bytes`),
    the tiers as they are otherwise.
    For device slots (`slot_device`, a GPU) the tiers are gathered on that GPU (its grid kept to
    `sm_share` of the SMs when given); the window's and the other nodes' rows are staged to it."""
    host: FeatureSource
    reader = dataset.row_reader() if window > 0 and partition is None else None
    if partition is not None:
        host = PeerRowSource(partition, tiers, storage_reads=storage_reads, window=window)
    elif reader is not None:
        host = WindowedTiers(tiers, reader, storage_reads=storage_reads, window=window, window_bytes=window_bytes)
    elif slot_device is not None:
        return CudaTiers(dataset, tiers, device=slot_device, storage_reads=storage_reads, sm_share=sm_share)
    else:
        return LocalTiers(dataset, tiers, device_index=device_index, storage_reads=storage_reads, window=window)
    return host if slot_device is None else StagedToDevice(host)
