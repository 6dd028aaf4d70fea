"""The producer: samples one rank's batches and gathers their features into ping-pong slots.

Per epoch it takes this rank's shard of the train ids, in batches, as the job's `EpochPlan`
says (epoch_plan.py: the rule every source of a job's batches follows), and for each batch:
samples it with the plan's sample seed (with a look-ahead window, `window` batches ahead,
their storage reads started at once: see lookahead.py and graphtier.service.storage.window),
waits for a FREE slot, copies the sampled structure and the seed labels into the slot,
gathers the input features from the tiers straight into the slot, marks it READY and tells
the consumer. A link job's batches are
seeded by train edges instead (`LinkSampler`: the pairs and their negatives, the endpoints
sampled; on a heterogeneous dataset its target relation's edges, each type's rows gathered as for a
heterogeneous node batch). A partitioned job's producer gathers instead from its node's copy and
fetches the other nodes' rows (peer_rows.py), the fetches started when the batch is sampled,
`PARTITION_LOOKAHEAD` batches (or `window`) ahead.
Where the rows come from (the tiers, the look-ahead window or the other nodes) is one
`FeatureSource` (feature_sources.py), chosen when the producer starts; a heterogeneous
dataset's rows come per featured node type from `HeteroRows` (hetero_rows.py), which does the
same per type. It never touches a
slot the consumer holds; it exits cleanly, unlinking its segments, when the consumer goes
away. The daemon forks it from a warm server (`spawn_producer`, see forkserver.py); it also
runs as a process of its own:

    python -m graphtier.service.pipeline.producer --config JSON|@PATH

which prints one line, the path of its layout.json, on stdout once a consumer may connect.
Exit status: 0 finished, consumer gone or SIGTERM; 1 failed (the error is in the control
block and in the log on stderr); 2 bad config.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType

import torch

from graphtier.contract.errors import SamplingError
from graphtier.contract.traffic import TrafficCounts
from graphtier.service.memory import FdExporter, SharedMemory
from graphtier.service.pipeline import capacity as caps
from graphtier.service.pipeline.config import ProducerConfig
from graphtier.service.pipeline.consumer_link import ConsumerLink
from graphtier.service.pipeline.control import ProducerStatus, SlotState
from graphtier.service.pipeline.device_batches import DeviceSlotBatches, write_structure
from graphtier.service.pipeline.epoch_plan import EpochPlan
from graphtier.service.pipeline.errors import ChannelError
from graphtier.service.pipeline.feature_sources import (
    CudaTiers,
    FeatureSource,
    feature_source,
)
from graphtier.service.pipeline.hetero_rows import HeteroRows
from graphtier.service.pipeline.layout import LAYOUT_FILE, MEMORY_SOCKET_FILE, SOCKET_FILE, ChannelLayout, SlotCapacity
from graphtier.service.pipeline.lookahead import Lookahead, Planned
from graphtier.service.pipeline.notify import ConnectionClosed, Listener
from graphtier.service.pipeline.ordering import CudaEventOrdering, HostOrdering, SlotOrdering
from graphtier.service.pipeline.slots import SlotViews, create_control, create_slot
from graphtier.service.prepared.edge_split import link_array
from graphtier.service.sampling import NeighborSampler, SampledSubgraph
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler
from graphtier.service.sampling.link import LinkSampler, max_link_pairs, max_link_seeds
from graphtier.service.sampling.subgraph import Sampler
from graphtier.service.shm import SegmentOwner
from graphtier.service.shm.naming import process_start_time
from graphtier.service.storage import StorageCounters
from graphtier.service.storage.buffers import StorageBuffers
from graphtier.service.store import attach_dataset


class Producer:
    """One rank's producer channel: its slots, control block and socket (see module docstring)."""

    def __init__(self, config: ProducerConfig, *, owner: SegmentOwner | None = None) -> None:
        self.config = config
        self.channel = config.channel_name
        self._own_owner = owner is None
        self.owner = owner or SegmentOwner()
        self._link: ConsumerLink | None = None
        self._layout_path: Path | None = None
        self.source: FeatureSource | None = None  # None when the dataset has no features
        self.ordering: SlotOrdering = HostOrdering()
        self._exporter: FdExporter | None = None  # passes the fds of VMM device slots
        self._retired: dict[int, list[SharedMemory]] = {}  # slot k's grown-out allocations, freed at its release
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _log(self, message: str) -> None:
        print(f"[producer {self.channel} pid {os.getpid()}] {message}", file=sys.stderr, flush=True)

    def _setup(self) -> None:
        cfg = self.config
        os.environ.update(cfg.gpu_env)  # MPS: before anything here initialises CUDA
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        buffers = self.storage_buffers = StorageBuffers.sized(cfg.storage_buffer_bytes)
        self.dataset = attach_dataset(cfg.dataset, storage_reads=cfg.storage_reads, staging_bytes=buffers.staging_bytes)
        graph = self.dataset.graph
        train_pairs = self._train_pairs() if cfg.link is not None else None
        # a link job's "train ids" are the indices of its train edges: shuffled and sharded as node ids are
        train = self.dataset.splits.get("train") if train_pairs is None else torch.arange(train_pairs.shape[0])
        num_train = 0 if train is None else train.numel()
        what = "train ids" if train_pairs is None else "train edges"
        try:
            self.plan = EpochPlan(num_train, cfg.batch_size, cfg.seed, cfg.rank, cfg.world_size, unit=what)
        except SamplingError as exc:
            raise ChannelError(f"dataset {cfg.dataset.dataset!r}: {exc}") from None
        assert train is not None  # the plan refuses no train ids
        self.steps = self.plan.steps_per_epoch
        self.train_ids = train
        self.slot_device = cfg.device_index if cfg.device == "cuda" else None
        if self.slot_device is not None:
            cfg.channel_dir.mkdir(parents=True, exist_ok=True)
            self.ordering = CudaEventOrdering.create(self.slot_device, cfg.num_slots)
            if cfg.device_memory == "vmm":
                self._exporter = FdExporter(str(cfg.channel_dir / MEMORY_SOCKET_FILE))
        tiers = self.dataset.feature_tiers(cfg.device_index) if self.dataset.has_features else None
        self.tiers = tiers
        if tiers is not None:
            self.source = feature_source(
                self.dataset,
                tiers,
                device_index=cfg.device_index,
                storage_reads=cfg.storage_reads,
                window=cfg.window,
                window_bytes=buffers.window_bytes,
                partition=cfg.partition,
                slot_device=self.slot_device,
                sm_share=cfg.grid_share,
            )
        self.device_batches: DeviceSlotBatches | None = None  # a --sampler gpu job's one-stream batches
        self.schema = (
            self.dataset.handle.hetero
        )  # a heterogeneous dataset's: heterogeneous samples, rows gathered per type
        self.hetero_rows: HeteroRows | None = None  # its input rows per featured node type
        self.sampler: Sampler  # the neighbour sampler below, or a link sampler over it
        hop_bounds = list(cfg.fanouts)
        if self.schema is not None:
            if cfg.sampler == "gpu" or cfg.partition is not None or cfg.device != "cpu":
                raise ChannelError(
                    f"dataset {cfg.dataset.dataset!r} is heterogeneous: its batches are sampled on the cpu into host "
                    "slots, "
                    "its rows on this node or partitioned per node type (hetero_partitions, not partition)"
                )
            assert self.dataset.edge_type is not None  # a heterogeneous handle carries it
            self.sampler = HeteroNeighborSampler(
                graph,
                self.dataset.edge_type,
                self.schema,
                cfg.relation_fanouts or cfg.fanouts,
                backend=cfg.sampler_backend,
            )
            relations = len(self.schema.relations)  # a node may expand every relation into its type
            self.hetero_rows = HeteroRows(
                self.dataset,
                storage_reads=cfg.storage_reads,
                window=cfg.window,
                window_bytes=buffers.window_bytes,
                partitions=cfg.hetero_partitions,
            )
            hop_bounds = [k * relations if k > 0 else -1 for k in cfg.fanouts]
        elif cfg.sampler == "gpu":
            self._setup_gpu_sampler()
        else:
            self.sampler = NeighborSampler(graph, cfg.fanouts, backend=cfg.sampler_backend)
        seed_capacity, pair_capacity = cfg.batch_size, None
        if cfg.link is not None and train_pairs is not None:
            link = cfg.link
            nodes = self.sampler
            assert isinstance(nodes, NeighborSampler | HeteroNeighborSampler)  # ProducerConfig: a link job's is cpu
            self.sampler = LinkSampler(
                nodes,
                train_pairs,
                graph.num_nodes,
                negatives=link.negatives,
                negative_sampling=link.negative_sampling,
            )
            seed_capacity = max_link_seeds(cfg.batch_size, link.negatives, link.negative_sampling)
            pair_capacity = max_link_pairs(cfg.batch_size, link.negatives)
        self._limit = caps.upper_bound(
            batch_size=seed_capacity, fanouts=hop_bounds, num_nodes=graph.num_nodes, num_edges=graph.num_edges
        )
        capacity = cfg.initial_capacity or self._probe()
        pid = os.getpid()
        self.control, control_ref, error_ref = create_control(self.owner, channel=self.channel, num_slots=cfg.num_slots)
        start_time = process_start_time(pid) or 0
        self.control.initialise(num_slots=cfg.num_slots, producer_pid=pid, producer_start_time=start_time)
        simulated = (
            self.source.simulated if self.source is not None else self.schema is not None
        )  # heterogeneous: accounted
        self.control.header["simulated"] = int(simulated)
        self._new_slot = partial(
            create_slot,
            channel=self.channel,
            batch_size=seed_capacity,
            pair_capacity=pair_capacity,
            hetero_rows=self.hetero_rows.row_types if self.hetero_rows is not None else None,
            feature_shape=tiers.row_shape if tiers is not None else None,
            feature_dtype=tiers.dtype if tiers is not None else torch.float32,
            device=self.slot_device,
            device_memory=cfg.device_memory,
            exporter=self._exporter,
        )
        self.slots: list[SlotViews] = []
        for k in range(cfg.num_slots):
            self.slots.append(self._create_slot(k, 0, capacity))
            self._record_capacity(k)
        cfg.channel_dir.mkdir(parents=True, exist_ok=True)
        listener = Listener(str(cfg.channel_dir / SOCKET_FILE))
        self._link = ConsumerLink(
            listener,
            self.control,
            channel=self.channel,
            heartbeat_s=cfg.heartbeat_interval_s,
            on_release=self._free_retired,
        )
        self.layout = ChannelLayout(
            channel=self.channel,
            dataset=cfg.dataset.dataset,
            producer_pid=pid,
            producer_start_time=self.control.header["producer_start_time"],
            socket_path=listener.path,
            control=control_ref,
            error_text=error_ref,
            rank=cfg.rank,
            world_size=cfg.world_size,
            fanouts=cfg.fanouts,
            batch_size=cfg.batch_size,
            epochs=cfg.epochs,
            steps_per_epoch=self.steps,
            num_nodes=graph.num_nodes,
            slots=[s.layout for s in self.slots],
        )
        self._write_layout()

    def _train_pairs(self) -> torch.Tensor:
        """A link job's train edges ([n, 2] in shared memory); ChannelError when the dataset has no edge split."""
        pairs = self.dataset.link_pairs.get(link_array("train"))
        if pairs is None:
            raise ChannelError(
                f"dataset {self.config.dataset.dataset!r} has no edge split to train link prediction on "
                "(prepare it with --edge-split)"
            )
        return pairs

    def _setup_gpu_sampler(self) -> None:
        """The GPU sampler over the dataset's tiered structure. With device slots gathered on the GPU
        (`CudaTiers`, or no features) every batch is made on one stream into its slot
        (`DeviceSlotBatches`); otherwise (host slots, or rows from the look-ahead window or other
        nodes) its samples are copied to the host for the host gather."""
        from graphtier.service.gpu import sampler as gpu  # CUDA only when asked for

        cfg = self.config
        source = self.source
        if self.slot_device is None or not (source is None or isinstance(source, CudaTiers)):
            self.sampler = gpu.host_copy_sampler(self.dataset, cfg.fanouts, cfg.device_index, sm_share=cfg.grid_share)
            return
        sampler = gpu.device_sampler(self.dataset, cfg.fanouts, self.slot_device, sm_share=cfg.grid_share)
        self.sampler = sampler
        labels = self.dataset.labels
        if labels is not None:  # small: one device copy, the seeds' labels gathered from it
            labels = labels.to(device=torch.device("cuda", self.slot_device), dtype=torch.int64)
        self.device_batches = DeviceSlotBatches(sampler, source.gather if source is not None else None, labels)
        self._traffic_due = 0.0

    def _probe(self) -> SlotCapacity:
        """Largest sizes over the first `probe_batches` batches of epoch 0, plus the margin."""
        cfg = self.config
        seen = []
        for step, seeds, sample_seed in self.plan.batches(self.train_ids, epoch=0):
            if step == cfg.probe_batches:
                break
            seen.append(caps.needed(self.sampler.sample(seeds, seed=sample_seed)))
        return caps.with_margin(caps.largest(seen), cfg.capacity_margin, self._limit)

    def _create_slot(self, k: int, generation: int, capacity: SlotCapacity) -> SlotViews:
        events = self.ordering.event_handles(k)
        return self._new_slot(self.owner, index=k, generation=generation, capacity=capacity, events=events)

    def _write_layout(self) -> None:
        path = self.config.channel_dir / LAYOUT_FILE
        tmp = path.with_name(f".{LAYOUT_FILE}.{os.getpid()}.tmp")
        tmp.write_text(self.layout.model_dump_json())
        os.replace(tmp, path)
        self._layout_path = path

    def _record_capacity(self, k: int) -> None:
        rec, layout = self.control.slots[k], self.slots[k].layout
        rec["generation"] = layout.generation
        rec["cap_nodes"], rec["cap_edges"], rec["cap_expanded"] = (
            layout.capacity.nodes,
            layout.capacity.edges,
            layout.capacity.expanded,
        )

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> ProducerStatus:
        """Serve every epoch to one consumer; returns FINISHED or CONSUMER_GONE."""
        ctl, cfg, link, source = self.control, self.config, self._require_link(), self.source
        try:
            link.accept(cfg.connect_timeout_s)
            ctl.status = ProducerStatus.RUNNING
            ahead = Lookahead(
                plan=self.plan,
                train_ids=self.train_ids,
                epochs=cfg.epochs,
                depth=source.depth
                if source is not None
                else self.hetero_rows.lookahead()
                if self.hetero_rows is not None
                else cfg.window,
                sample=self._sample if self.device_batches is None else None,
                admit=(lambda sub: source.admit(sub.node_ids))
                if source is not None
                else (self.hetero_rows.admit if self.hetero_rows is not None and self.hetero_rows.admits else None),
            )
            ctl.header.set_storage(StorageCounters(mode=cfg.storage_reads, window=cfg.window))
            for epoch in range(cfg.epochs):
                ctl.header["epoch"] = epoch
                for _ in range(self.steps):
                    planned = ahead.next()
                    assert planned is not None and planned.epoch == epoch  # the plan has epochs x steps batches
                    self._produce(link, planned, ahead.sampled_ahead)
                self._report_device_traffic(ahead.sampled_ahead, force=True)
                ctl.header["epochs_completed"] = epoch + 1
                link.send({"kind": "epoch_end", "epoch": epoch})
            ctl.header["end_of_data"] = 1
            link.send({"kind": "end"})
            ctl.status = ProducerStatus.DRAINING
            link.drain()  # keep the segments until every batch is released
            ctl.status = ProducerStatus.FINISHED
        except ConnectionClosed:
            ended = ctl.header["end_of_data"] == 1  # a consumer leaving after the end is done, not gone
            ctl.status = ProducerStatus.FINISHED if ended else ProducerStatus.CONSUMER_GONE
        except Exception as exc:
            self._fail(f"{type(exc).__name__}: {exc}")
            raise
        except BaseException:
            ctl.status = ProducerStatus.TERMINATED
            raise
        return ctl.status

    def _require_link(self) -> ConsumerLink:
        if self._link is None:
            raise ChannelError(f"producer of channel {self.channel!r} is closed")
        return self._link

    def _fit(self, k: int, sub: SampledSubgraph) -> tuple[SlotViews, bool]:
        """Slot k's views, re-created larger (new allocation, next generation) when `sub` does not fit.

        The old allocation is retired, not freed: the rank still maps it until the batch announcing
        the new generation reaches it (it then maps the new one and unmaps the old), and freeing
        device memory another process has open over IPC is undefined behaviour in CUDA. The rank's
        release of that batch proves the old mapping gone: `_free_retired` frees it then."""
        views, need = self.slots[k], caps.needed(sub)
        if views.layout.capacity.fits(need):
            return views, False
        capacity = caps.grow(views.layout.capacity, need, self.config.capacity_margin, self._limit)
        generation = views.layout.generation + 1
        self._retired.setdefault(k, []).append(views.memory)
        views = self._create_slot(k, generation, capacity)
        self.slots[k] = views
        self._record_capacity(k)
        self.control.header["slot_growths"] += 1
        self.layout = self.layout.model_copy(update={"slots": [s.layout for s in self.slots]})
        self._write_layout()
        self._log(f"slot {k} grown to {capacity.model_dump()} (generation {generation}) for {need.model_dump()}")
        return views, True

    def _free_retired(self, k: int) -> None:
        """The consumer released slot k: the allocations slot k grew out of are mapped by nobody now."""
        for memory in self._retired.pop(k, []):
            memory.close()

    def _sample(self, seeds: torch.Tensor, seed: int) -> SampledSubgraph:
        sub = self.sampler.sample(seeds, seed=seed)
        self.control.beat()
        return sub

    def _produce(self, link: ConsumerLink, planned: Planned, sampled_ahead: int) -> None:
        ctl = self.control
        epoch, step, batch, seeds, seed = (
            planned.epoch,
            planned.step,
            planned.batch,
            planned.seeds,
            planned.sample_seed,
        )
        type_rows: dict[str, int] = {}  # a heterogeneous batch's input rows of each featured type
        if planned.subgraph is None:
            k, views, grown, sub, sample_ns, t1 = self._make_on_device(link, planned)
            rec = ctl.slots[k]
            rec.set_traffic(TrafficCounts(simulated=False))  # counted on the device, reported per interval
            self._report_device_traffic(sampled_ahead)
            num_seeds = seeds.numel()
        else:
            sub, sample_ns = planned.subgraph, planned.sample_ns
            k = link.acquire()
            rec = ctl.slots[k]
            rec["state"] = SlotState.FILLING
            t1 = time.perf_counter_ns()
            self.ordering.before_fill(k)  # this process's writes into slot k follow the rank's reads of it
            views, grown = self._fit(k, sub)
            num_seeds = seeds.numel()
            if sub.pairs is not None and views.pairs is not None:
                num_seeds = sub.num_seeds  # the endpoints of the batch's pairs: they have no labels to learn
                write_structure(views, sub, None, num_seeds)
                views.pairs[: sub.num_pairs].copy_(sub.pairs)
            else:
                write_structure(views, sub, self.dataset.labels, num_seeds)
            if self.hetero_rows is not None:
                tickets = planned.ticket if isinstance(planned.ticket, dict) else None
                traffic, type_rows = self.hetero_rows.fill(views, sub, tickets, ctl, sampled_ahead)
                rec.set_traffic(traffic)
                ctl.header.set_traffic(traffic, add=True)
            if views.features is not None and self.source is not None:
                admitted = planned.ticket
                assert not isinstance(
                    admitted, dict
                )  # per-type tickets are a heterogeneous batch's, which has no source
                traffic = self.source.fill(sub.node_ids, admitted, views.features)
                rec.set_traffic(traffic)
                ctl.header.set_traffic(traffic, add=True)
                self.source.count(ctl, traffic, admitted, sampled_ahead)
        nodes, edges, expanded = sub.num_nodes, sub.num_edges, sub.indptr.numel() - 1
        t2 = time.perf_counter_ns()
        for name, value in (
            ("batch", batch),
            ("epoch", epoch),
            ("step", step),
            ("num_seeds", num_seeds),
            ("num_nodes", nodes),
            ("num_edges", edges),
            ("num_expanded", expanded),
            ("num_hops", sub.num_layers),
            ("sample_seed", seed),
            ("sample_ns", sample_ns),
            ("gather_ns", t2 - t1),
        ):
            rec[name] = value
        per_hop_nodes, per_hop_edges = rec.array("nodes_per_hop"), rec.array("edges_per_hop")
        per_hop_nodes[:] = 0
        per_hop_edges[:] = 0
        per_hop_nodes[: sub.num_layers + 1] = sub.num_nodes_per_hop
        per_hop_edges[: sub.num_layers] = sub.num_edges_per_hop
        ctl.header["sample_ns"] += sample_ns
        ctl.header["gather_ns"] += t2 - t1
        ctl.header["seeds_total"] += seeds.numel()
        ctl.header["sampled_nodes_total"] += nodes
        ctl.header["sampled_edges_total"] += edges
        ctl.header["batches_produced"] += 1
        self.ordering.after_fill(k)
        rec["ready_ns"] = time.monotonic_ns()
        rec["state"] = SlotState.READY
        message: dict[str, object] = {
            "kind": "ready",
            "slot": k,
            "batch": batch,
            "generation": views.layout.generation,
        }
        if sub.pairs is not None:
            message["pairs"], message["positives"] = sub.num_pairs, sub.num_positive
        if sub.is_hetero:
            message["type_rows"], message["num_relations"] = type_rows, sub.num_relations
        if grown:
            message["layout"] = views.layout.model_dump(mode="json")
        link.send(message)
        ctl.beat()

    def _make_on_device(
        self, link: ConsumerLink, planned: Planned
    ) -> tuple[int, SlotViews, bool, SampledSubgraph, int, int]:
        """A --sampler gpu batch made on one stream: sampled, then slot k taken (once the sizes are
        known), ordered after the rank's reads, grown if need be, and filled. Returns k, its views,
        whether it grew, the subgraph (on the GPU), the sampling time and when the slot was taken."""
        assert self.device_batches is not None
        t0 = time.perf_counter_ns()
        taken: list[int] = []

        def into(sub: SampledSubgraph) -> SlotViews:
            taken.append(time.perf_counter_ns())
            k = link.acquire()
            self.control.slots[k]["state"] = SlotState.FILLING
            taken.append(time.perf_counter_ns())
            taken.append(k)
            self.ordering.before_fill(k)  # the writes below follow the rank's reads of slot k
            views, grown = self._fit(k, sub)
            taken.append(int(grown))
            self.control.beat()
            return views

        on_gpu = torch.cuda.device(self.slot_device) if self.slot_device is not None else contextlib.nullcontext()
        with on_gpu:  # the kernels launch with the slot's GPU current, on its current stream
            sub, views = self.device_batches.make(planned.seeds, seed=planned.sample_seed, into=into)
        sampled, t1, k, grown = taken
        return k, views, bool(grown), sub, sampled - t0, t1

    def _report_device_traffic(self, sampled_ahead: int, *, force: bool = False) -> None:
        """A --sampler gpu producer's rows per tier since the last report, read back from the GPU
        once per heartbeat interval (and at each epoch's end), added to the control block."""
        if self.device_batches is None:
            return
        now = time.monotonic()
        if not force and now < self._traffic_due:
            return
        self._traffic_due = now + self.config.heartbeat_interval_s
        traffic = self.device_batches.take_traffic()
        if traffic is not None and self.source is not None:
            self.control.header.set_traffic(traffic, add=True)
            self.source.count(self.control, traffic, None, sampled_ahead)

    def _fail(self, message: str) -> None:
        """Record the error for the consumer and the daemon, and tell the consumer if it listens."""
        self.control.set_error(message)
        self.control.status = ProducerStatus.FAILED
        self._log(f"failed: {message}")
        if self._link is not None:
            self._link.try_send({"kind": "error", "message": message[:4000]})

    def close(self) -> None:
        """Close the socket and unlink every segment and file this producer made; idempotent."""
        if self.source is not None:
            self.source.close()
            self.source = None
        hetero_rows = getattr(self, "hetero_rows", None)
        if hetero_rows is not None:
            hetero_rows.close()
        dataset = getattr(self, "dataset", None)
        if dataset is not None:
            dataset.detach()  # the device tier mappings and host registrations of device slots' gathers
        if self._link is not None:
            self._link.close()
            self._link = None
        for views in getattr(self, "slots", []):
            views.memory.close()
        self.slots = []
        for k in list(getattr(self, "_retired", {})):
            self._free_retired(k)
        if self._exporter is not None:
            self._exporter.close()
            self._exporter = None
        self.ordering.close()
        if self._layout_path is not None:
            try:
                if ChannelLayout.read(self._layout_path.parent).producer_pid == os.getpid():
                    self._layout_path.unlink()
            except (ChannelError, OSError):
                pass
            self._layout_path = None
        if self._own_owner:
            self.owner.close()


class _Terminated(BaseException):
    """Raised in the main thread on SIGTERM so cleanup runs."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated()


def run_producer(config: ProducerConfig, announce: Callable[[Path], None]) -> int:
    """Serve one channel until it ends; `announce(layout_path)` once a consumer may connect. Returns the exit status."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    producer: Producer | None = None
    try:
        producer = Producer(config)
        announce(config.channel_dir / LAYOUT_FILE)
        status = producer.run()
        producer._log(f"exiting: {status.name.lower()}")
        return 0
    except _Terminated:
        return 0
    except Exception as exc:
        if producer is None:
            print(f"graphtier producer {config.channel_name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc()
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        if producer is not None:
            producer.close()


def _announce_on_stdout(layout_path: Path) -> None:
    print(layout_path, flush=True)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the handshake line was the last stdout output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m graphtier.service.pipeline.producer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", required=True, help="ProducerConfig as JSON, or @PATH of a JSON file")
    args = parser.parse_args(argv)
    try:
        config = ProducerConfig.parse(args.config)
    except ChannelError as exc:
        print(f"graphtier producer: {exc}", file=sys.stderr)
        return 2
    return run_producer(config, _announce_on_stdout)


if __name__ == "__main__":
    sys.exit(main())
