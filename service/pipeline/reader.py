"""`ChannelReader`: the consumer end of a producer channel, used inside a trainer rank.

It opens the slots' memory handles once (host slots read-only; device slots on the rank's GPU,
with their interprocess events: ordering.py) and the control block writable (for its own
counters), connects to the producer's socket, and hands out `Batch`es of zero-copy views: CPU
tensors of host slots, CUDA tensors of device slots. Every wait is bounded: it polls the
socket with a short timeout and, between polls, checks that the producer process lives (pid +
start time) and that its heartbeat is younger than `timeout`, raising ProducerDiedError /
ProducerStalledError / ProducerFailedError naming the pid and the channel instead of hanging.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

from graphtier.contract.errors import SharedMemoryError
from graphtier.service.pipeline.batch import Batch
from graphtier.service.pipeline.control import ChannelStats, ControlBlock, ProducerStatus, SlotState
from graphtier.service.pipeline.errors import (
    ChannelError,
    ProducerDiedError,
    ProducerFailedError,
    ProducerStalledError,
)
from graphtier.service.pipeline.layout import ChannelLayout, SlotLayout
from graphtier.service.pipeline.notify import ConnectionClosed, MessageSocket, Received, connect
from graphtier.service.pipeline.ordering import HostOrdering, SlotOrdering, slot_ordering
from graphtier.service.pipeline.slots import SlotViews, attach_control, attach_slot
from graphtier.service.sampling import SampledSubgraph
from graphtier.service.shm.naming import process_start_time

if TYPE_CHECKING:
    import torch


class ChannelReader:
    """Iterate a producer's batches: `for batch in reader.epoch(): ...` per epoch, or `for batch in reader`.

    With `auto_release` (the default) asking for the next batch releases the previous one;
    otherwise call `batch.release()` (or use `with batch:`). At most `num_slots` batches
    can be held at once.
    """

    def __init__(
        self, layout: ChannelLayout, *, timeout: float = 30.0, auto_release: bool = True, device: int | None = None
    ) -> None:
        """`device`: this process's GPU for device slots (its ordinal of the slots' GPU when None)."""
        if timeout <= 0:
            raise ChannelError(f"timeout must be > 0 seconds, got {timeout}")
        self.layout = layout
        self.timeout = timeout
        self.auto_release = auto_release
        self.epochs_completed = 0
        self.finished = False
        self._poll_s = min(0.25, timeout / 4)
        self._closed = False
        self._conn: MessageSocket | None = None
        self._held: dict[int, Batch] = {}
        self._last: Batch | None = None
        self._wait_ns = 0
        self._device = device
        self._slots: list[SlotViews] = []
        self._ordering: SlotOrdering = HostOrdering()
        try:
            self.control: ControlBlock = attach_control(layout.control, layout.error_text, writable=True)
            for slot in layout.slots:
                self._slots.append(attach_slot(slot, device=device))
            if self._slots and self._device is None and self._slots[0].device.type == "cuda":
                self._device = self._slots[0].device.index
            events = [
                (s.ready_event, s.released_event) if s.ready_event and s.released_event else None for s in layout.slots
            ]
            self._ordering = slot_ordering(events, self._device)
        except SharedMemoryError as exc:
            self._close_slots()
            self._check_alive()
            raise ChannelError(f"cannot attach channel {layout.channel!r}: {exc}") from None
        except BaseException:
            self._close_slots()
            raise
        if not self.control.valid:
            self._close_slots()
            raise ChannelError(f"channel {layout.channel!r}: {layout.control.name} is not a producer control block")
        try:
            self._conn = connect(layout.socket_path)
        except OSError as exc:
            self._check_alive()
            raise ChannelError(
                f"cannot connect to producer pid {layout.producer_pid} of channel {layout.channel!r} at "
                f"{layout.socket_path}: {exc.strerror or exc} (is another consumer already attached?)"
            ) from None
        try:
            self._conn.send({"kind": "hello", "pid": os.getpid()})
        except ConnectionClosed:
            self.close()
            self._producer_gone()

    def _describe(self) -> str:
        return f"producer pid {self.layout.producer_pid} of channel {self.layout.channel!r}"

    def _producer_alive(self) -> bool:
        return process_start_time(self.layout.producer_pid) == self.layout.producer_start_time

    def _check_alive(self) -> None:
        if not self._producer_alive():
            raise ProducerDiedError(
                f"{self._describe()} is gone (killed or crashed)",
                pid=self.layout.producer_pid,
                channel=self.layout.channel,
            )

    def _check_producer(self) -> None:
        """Raise if the producer died, failed, or made no progress for `timeout` seconds."""
        pid, channel = self.layout.producer_pid, self.layout.channel
        if self.control.status == ProducerStatus.FAILED:
            raise ProducerFailedError(f"{self._describe()} failed: {self.control.error()}", pid=pid, channel=channel)
        self._check_alive()
        age = self.control.heartbeat_age_s()
        if age > self.timeout:
            raise ProducerStalledError(
                f"{self._describe()} is alive but has shown no progress for {age:.1f} s (timeout {self.timeout:g} s; "
                f"status {self.control.status.name.lower()}): stopped (SIGSTOP), swapping or deadlocked",
                pid=pid,
                channel=channel,
            )

    def _producer_gone(self) -> NoReturn:
        """The socket closed before the end of data: say why, as precisely as the control block allows."""
        pid, channel = self.layout.producer_pid, self.layout.channel
        deadline = time.monotonic() + min(self.timeout, 5.0)
        while self._producer_alive() and self.control.status != ProducerStatus.FAILED and time.monotonic() < deadline:
            time.sleep(0.02)  # the process is exiting; give it a moment to finish
        if self.control.status == ProducerStatus.FAILED:
            raise ProducerFailedError(f"{self._describe()} failed: {self.control.error()}", pid=pid, channel=channel)
        if self.control.status == ProducerStatus.TERMINATED:
            how = "was terminated (SIGTERM)"
        else:
            how = "closed the channel but still runs" if self._producer_alive() else "died"
        raise ProducerDiedError(
            f"{self._describe()} {how} after publishing {self.control.header['batches_produced']} batches",
            pid=pid,
            channel=channel,
        )

    def _wait_message(self) -> Received:
        assert self._conn is not None
        start = time.monotonic_ns()
        try:
            while True:
                try:
                    message = self._conn.recv(self._poll_s)
                except ConnectionClosed:
                    self._producer_gone()
                if message is not None:
                    return message
                self._check_producer()
        finally:
            self._wait_ns += time.monotonic_ns() - start

    def _next_event(self) -> Batch | int | None:
        """The next batch, an epoch number at an epoch's end, or None at the end of the data."""
        if self._closed:
            raise ChannelError(f"the reader of channel {self.layout.channel!r} is closed")
        if self.finished:
            return None
        if self.auto_release and self._last is not None:
            self._last.release()
        if len(self._held) >= len(self._slots):
            raise ChannelError(
                f"all {len(self._slots)} slots of channel {self.layout.channel!r} are held; "
                "release a batch before asking for the next one"
            )
        message = self._wait_message()
        kind = message["kind"]
        if kind == "ready":
            return self._take(message)
        if kind == "epoch_end":
            self.epochs_completed = int(message["epoch"]) + 1
            return int(message["epoch"])
        if kind == "end":
            self.finished = True
            return None
        if kind == "error":
            raise ProducerFailedError(
                f"{self._describe()} failed: {message.get('message')}",
                pid=self.layout.producer_pid,
                channel=self.layout.channel,
            )
        raise ChannelError(f"unexpected message {message!r} from {self._describe()}")

    def _take(self, message: Received) -> Batch:
        k, generation = int(message["slot"]), int(message["generation"])
        if not 0 <= k < len(self._slots):
            raise ChannelError(f"{self._describe()} announced slot {k}; the channel has {len(self._slots)}")
        if "layout" in message:  # the producer grew the slot: a new allocation
            layout = SlotLayout.model_validate(message["layout"])
            try:
                grown = attach_slot(layout, device=self._device)
            except SharedMemoryError:
                self._check_alive()
                raise
            old, self._slots[k] = self._slots[k], grown
            old.memory.close()  # released before the producer grew it: no batch views it
        views, rec = self._slots[k], self.control.slots[k]
        if (views.layout.generation, rec["generation"], rec["batch"]) != (generation, generation, message["batch"]):
            raise ChannelError(
                f"slot {k} of channel {self.layout.channel!r} is out of step: announced batch {message['batch']} "
                f"generation {generation}, control block says batch {rec['batch']} generation {rec['generation']}, "
                f"attached generation {views.layout.generation}"
            )
        cap = views.layout.capacity
        nodes, edges, expanded, hops = rec["num_nodes"], rec["num_edges"], rec["num_expanded"], rec["num_hops"]
        too_big = nodes > cap.nodes or edges > cap.edges or expanded > cap.expanded
        pairs, positives = int(message.get("pairs", 0)), int(message.get("positives", 0))
        pair_room = views.pairs.shape[0] if views.pairs is not None else 0
        too_big = too_big or pairs > pair_room or positives > pairs
        if too_big or rec["num_seeds"] > views.labels.numel():
            raise ChannelError(f"slot {k} of channel {self.layout.channel!r} claims more than its capacity {cap}")
        hetero = views.edge_types is not None and views.node_types is not None
        subgraph = SampledSubgraph(
            node_ids=views.node_ids[:nodes],
            indptr=views.indptr[: expanded + 1],
            indices=views.indices[:edges],
            num_nodes_per_hop=rec.array("nodes_per_hop")[: hops + 1].tolist(),
            num_edges_per_hop=rec.array("edges_per_hop")[:hops].tolist(),
            edge_types=views.edge_types[:edges] if hetero and views.edge_types is not None else None,
            node_types=views.node_types[:nodes] if hetero and views.node_types is not None else None,
            num_relations=int(message.get("num_relations", 0)) if hetero else 0,
            pairs=views.pairs[:pairs] if views.pairs is not None else None,
            num_positive=positives,
        )
        if hetero:
            type_rows = dict(message.get("type_rows", {}))
            if set(type_rows) != set(views.type_features) or any(
                not 0 <= int(n) <= views.type_features[name].shape[0] for name, n in type_rows.items()
            ):
                raise ChannelError(
                    f"slot {k} of channel {self.layout.channel!r}: rows per type {type_rows} do not fit its regions "
                    f"{ {name: rows.shape[0] for name, rows in views.type_features.items()} }"
                )
        self._ordering.before_read(k)  # this process's reads of the slot follow the producer's writes
        rec["state"] = SlotState.HELD
        header = self.control.header
        header["batches_consumed"] += 1
        header["consumer_wait_ns"] += self._wait_ns
        header["consumer_last_wait_ns"] = self._wait_ns
        x: torch.Tensor | dict[str, torch.Tensor] | None = (
            views.features[:nodes] if views.features is not None else None
        )
        if hetero:  # each featured type's rows, as many as the producer filled
            x = {name: views.type_features[name][: int(n)] for name, n in type_rows.items()}
        batch = Batch(
            slot=k,
            batch=rec["batch"],
            epoch=rec["epoch"],
            step=rec["step"],
            steps_per_epoch=self.layout.steps_per_epoch,
            subgraph=subgraph,
            x=x,
            y=views.labels[: rec["num_seeds"]],
            sample_seed=rec["sample_seed"],
            sample_s=rec["sample_ns"] / 1e9,
            gather_s=rec["gather_ns"] / 1e9,
            wait_s=self._wait_ns / 1e9,
            traffic=rec.traffic(bool(header["simulated"])),
            _release=self._release,
        )
        self._wait_ns = 0
        self._held[k] = batch
        self._last = batch
        return batch

    def _release(self, batch: Batch) -> None:
        slot = batch.slot
        assert slot is not None  # only this reader's batches, each read out of a slot, come back here
        batch.released = True
        if self._held.get(slot) is batch:
            del self._held[slot]
        if self._closed or self._conn is None:
            return
        self._ordering.after_read(slot)  # the producer's next writes follow this process's reads
        try:
            self._conn.send({"kind": "release", "slot": slot})
        except ConnectionClosed:
            pass  # the producer is gone; the next wait says how

    def next_batch(self) -> Batch | None:
        """The next batch across epoch boundaries; None once the producer has sent every epoch."""
        while True:
            event = self._next_event()
            if event is None or isinstance(event, Batch):
                return event

    def epoch(self) -> Iterator[Batch]:
        """The batches of the current epoch, up to its end marker (nothing once the data has ended)."""
        while isinstance(event := self._next_event(), Batch):
            yield event

    def __iter__(self) -> Iterator[Batch]:
        while (batch := self.next_batch()) is not None:
            yield batch

    def stats(self) -> ChannelStats:
        return self.control.stats()

    def _close_slots(self) -> None:
        slots, self._slots = self._slots, []
        for views in slots:
            views.memory.close()
        self._ordering.close()
        self._ordering = HostOrdering()

    def close(self) -> None:
        """Tell the producer goodbye and drop the slot mappings (batches still referenced stay valid
        for host slots; device slots are unmapped, so their batches must be released first)."""
        if self._closed:
            return
        self._closed = True
        if self._conn is not None:
            try:
                self._conn.send({"kind": "bye"})
            except (ConnectionClosed, OSError):
                pass
            self._conn.close()
        for batch in list(self._held.values()):
            batch.released = True
        self._held.clear()
        self._last = None
        self._close_slots()

    def __enter__(self) -> ChannelReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
