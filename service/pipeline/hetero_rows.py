"""`HeteroRows`: a heterogeneous batch's input rows, gathered per featured node type into its slot.

A heterogeneous dataset keeps one set of tiers per featured node type (featureless types have no
rows: a model learns them). For a batch just sampled, each featured type's input nodes (in
type-local ids, in their order among the batch's inputs) are read from that type's tiers: through
the type's look-ahead window when the job has one (its storage rows read early, once), from this
node's copy and the other nodes' for a partitioned job (fetched when the batch is sampled), or
straight from the tiers. The slot also receives the batch's relations and node types. Storage and
network counters are summed over the types into the channel's control block, as a homogeneous
batch's feature source counts them.
"""

from __future__ import annotations

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.contract.storage import StorageReads
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.pipeline.config import PartitionedFeatures
from graphtier.service.pipeline.control import ControlBlock
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.feature_sources import PARTITION_LOOKAHEAD, WindowedTiers
from graphtier.service.pipeline.peer_rows import PeerRows, RemoteTicket
from graphtier.service.pipeline.slots import SlotViews
from graphtier.service.sampling import SampledSubgraph
from graphtier.service.storage import StorageCounters, Ticket
from graphtier.service.storage.window import RowReader
from graphtier.service.store import AttachedDataset

Tickets = dict[str, Ticket | RemoteTicket]  # per featured type: its window's or its fetches' ticket


class HeteroRows:
    """Per featured node type of `dataset`: its tiers, and its window or its partition (module docstring)."""

    def __init__(
        self,
        dataset: AttachedDataset,
        *,
        storage_reads: StorageReads,
        window: int,
        window_bytes: int | None,
        partitions: dict[str, PartitionedFeatures],
    ) -> None:
        """`window_bytes` (the producer's window budget) is shared evenly between the types' windows;
        `partitions` (a partitioned job's, by type) must name every featured type."""
        schema = dataset.handle.hetero
        if schema is None:
            raise GraphtierError(f"dataset {dataset.handle.dataset!r} has one node type: it has no rows per type")
        self.dataset, self.schema = dataset, schema
        self.storage_reads, self.window = storage_reads, window
        self.featured = list(dataset.handle.hetero_features)
        self.mapped_bytes = 0  # mmap mode: the storage rows' bytes copied from the mappings
        self.windows: dict[str, WindowedTiers] = {}
        self.peers: dict[str, PeerRows] = {}
        if partitions:
            self.peers = self._peers(partitions)
        elif window > 0:
            self.windows = self._windows(window_bytes)

    @property
    def row_types(self) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
        """Each featured type's (row shape, dtype): the regions of rows a slot holds."""
        return {
            name: (self.dataset.hetero_tiers(name).row_shape, self.dataset.hetero_tiers(name).dtype)
            for name in self.featured
        }

    @property
    def admits(self) -> bool:
        """Whether a batch starts reads or fetches when it is sampled (a window or a partition)."""
        return bool(self.windows or self.peers)

    def lookahead(self) -> int:
        """Batches to sample ahead: the window's, and for a partitioned job at least `PARTITION_LOOKAHEAD`."""
        return max(self.window, PARTITION_LOOKAHEAD) if self.peers else self.window

    def _windows(self, window_bytes: int | None) -> dict[str, WindowedTiers]:
        readers = {
            name: reader for name in self.featured if (reader := self.dataset.hetero_row_reader(name)) is not None
        }
        share = None if window_bytes is None or not readers else window_bytes // len(readers)
        return {
            name: WindowedTiers(
                self.dataset.hetero_tiers(name),
                reader,
                storage_reads=self.storage_reads,
                window=self.window,
                window_bytes=share,
            )
            for name, reader in readers.items()
        }

    def _peers(self, partitions: dict[str, PartitionedFeatures]) -> dict[str, PeerRows]:
        if set(partitions) != set(self.featured):
            raise ChannelError(
                f"dataset {self.dataset.handle.dataset!r}: partitioned rows of types {sorted(partitions)}, "
                f"but its featured node types are {sorted(self.featured)}"
            )
        peers: dict[str, PeerRows] = {}
        try:
            for name, partition in partitions.items():
                tiers = self.dataset.hetero_tiers(name)
                peers[name] = PeerRows(partition, row_shape=tiers.row_shape, dtype=tiers.dtype)
        except BaseException:
            for rows in peers.values():
                rows.close()
            raise
        return peers

    def local_ids(self, sub: SampledSubgraph) -> dict[str, torch.Tensor]:
        """The batch's input nodes of each featured type, in type-local ids, in their order among the inputs."""
        if sub.node_types is None:
            raise GraphtierError("a sample of a graph with one node type has no rows per type")
        return {
            info.name: sub.node_ids[sub.node_types == index] - info.offset
            for index, info in enumerate(self.schema.node_types)
            if info.name in self.featured
        }

    def admit(self, sub: SampledSubgraph) -> Tickets:
        """Start the windows' reads of each type's storage rows of a batch just sampled (or, for a
        partitioned job, the fetches of each type's rows this node does not hold)."""
        local = self.local_ids(sub)
        tickets: Tickets = {name: window.admit(local[name]) for name, window in self.windows.items()}
        tickets.update({name: rows.admit(local[name]) for name, rows in self.peers.items()})
        return tickets

    def fill(
        self, views: SlotViews, sub: SampledSubgraph, tickets: Tickets | None, control: ControlBlock, sampled_ahead: int
    ) -> tuple[TrafficCounts, dict[str, int]]:
        """The batch's relations and node types into slot `views`, and each featured type's input rows
        (through its window with the batch's `tickets`, from its partition, or from its tiers); the
        storage and network counters into the `control` block. Returns the traffic and the rows of each type."""
        if views.edge_types is None or views.node_types is None or sub.edge_types is None or sub.node_types is None:
            raise ChannelError("a heterogeneous batch needs a slot with relation and node-type regions")
        views.edge_types[: sub.num_edges].copy_(sub.edge_types)
        views.node_types[: sub.num_nodes].copy_(sub.node_types)
        traffic, counts = TrafficCounts(simulated=True), {}
        storage_rows, hits, hit_bytes = 0, 0, 0
        for name, local in self.local_ids(sub).items():
            out, window, peers = views.type_features[name], self.windows.get(name), self.peers.get(name)
            if peers is not None:
                assert tickets is not None  # every batch of a partitioned job is admitted when it is sampled
                ticket = tickets[name]
                assert isinstance(ticket, RemoteTicket)
                type_traffic = peers.fill(ticket, local, out)
            elif window is not None and tickets is not None:
                ticket = tickets[name]
                assert isinstance(ticket, Ticket)
                type_traffic = window.fill(local, ticket, out)
                hits += ticket.hits
                hit_bytes += ticket.hits * window.tiers.row_bytes
            else:
                type_traffic = self.dataset.gather_hetero(name, local, out)
                self.mapped_bytes += type_traffic.storage.bytes if self.storage_reads == "mmap" else 0
            traffic += type_traffic
            storage_rows += type_traffic.storage.rows
            counts[name] = local.numel()
        self._count_storage(control, storage_rows, hits, hit_bytes, sampled_ahead)
        if self.peers:
            self._count_network(control)
        return traffic, counts

    def _count_storage(self, control: ControlBlock, rows: int, hits: int, hit_bytes: int, sampled_ahead: int) -> None:
        """A batch's `rows` storage rows (all types; `hits` of them served by the windows, `hit_bytes` long)
        added to the storage counters, with the costs so far of every type's reader (direct, page-cache, or
        the window's mapping) or the bytes copied from the mappings (mmap)."""
        readers: list[RowReader | None] = []
        for name in self.featured:
            window = self.windows[name].window if name in self.windows else None
            if window is not None:
                readers.append(window.reader)
            else:
                readers.append(None if name in self.windows else self.dataset.hetero_tiers(name).storage_reader)
        stats = [r.stats for r in readers if r is not None]
        header = control.header
        before = header.storage()
        header.set_storage(
            StorageCounters(
                mode=self.storage_reads,
                window=self.window,
                read_rows=before.read_rows + rows - hits,
                read_bytes=self.mapped_bytes + sum(r.bytes_read for r in stats),
                requests=sum(r.requests for r in stats),
                window_rows=before.window_rows + hits,
                window_bytes=before.window_bytes + hit_bytes,
                io_seconds=sum(r.io_seconds for r in stats),
                request_seconds=sum(r.request_seconds for r in stats),
                read_seconds=sum(r.seconds for r in stats),
                lookahead_batches=sampled_ahead,
                window_cached_rows=sum(w.window.cached_rows for w in self.windows.values() if w.window is not None),
            )
        )

    def _count_network(self, control: ControlBlock) -> None:
        """A partitioned job's network counters so far (per peer by node rank), summed over types."""
        header, peers = control.header, list(self.peers.values())
        for name in ("peer_rows", "peer_bytes", "peer_requests"):
            total = sum(getattr(rows, name) for rows in peers)
            header.array(name)[: total.size] = total
        header["network_fetch_ns"] = sum(rows.fetch_ns for rows in peers)
        header["network_wait_ns"] = sum(rows.wait_ns for rows in peers)

    def close(self) -> None:
        """Close every type's window and partition; idempotent."""
        windows, self.windows = self.windows, {}
        peers, self.peers = self.peers, {}
        for window in windows.values():
            window.close()
        for rows in peers.values():
            rows.close()
