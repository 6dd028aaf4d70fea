"""The wire form of a channel: `ChannelGrant` (what OpenChannel returns) as a `graphtier.v1` message.

The grant carries the producer's `ChannelLayout`: its slots' memory handles and regions (and
events, for device slots), its control block, the socket the rank wakes it on. The daemon converts it to a message, a
trainer rank back; both import it from here, beside the layout it carries.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphtier.service.memory.wire import handle_from_proto, handle_to_proto, region_from_proto, region_to_proto
from graphtier.service.pipeline.layout import ChannelLayout, SlotCapacity, SlotLayout
from graphtier.service.store.wire import segment_ref_from_proto, segment_ref_to_proto
from graphtier.v1 import channels_pb2


@dataclass(frozen=True)
class ChannelGrant:
    """What OpenChannel returns: the producer's layout plus what the rank needs to build its model."""

    job_id: str
    layout: ChannelLayout
    feature_dim: int
    num_classes: int
    stall_timeout_s: float = 60.0


def _slot_to_proto(slot: SlotLayout) -> channels_pb2.ChannelSlot:
    message = channels_pb2.ChannelSlot(
        index=slot.index,
        generation=slot.generation,
        capacity=channels_pb2.SlotCapacity(**slot.capacity.model_dump()),
        memory=handle_to_proto(slot.memory),
        node_ids=region_to_proto(slot.node_ids),
        indptr=region_to_proto(slot.indptr),
        indices=region_to_proto(slot.indices),
        labels=region_to_proto(slot.labels),
        ready_event=slot.ready_event or "",
        released_event=slot.released_event or "",
    )
    if slot.features is not None:
        message.features.CopyFrom(region_to_proto(slot.features))
    if slot.pairs is not None:
        message.pairs.CopyFrom(region_to_proto(slot.pairs))
    if slot.edge_types is not None:
        message.edge_types.CopyFrom(region_to_proto(slot.edge_types))
    if slot.node_types is not None:
        message.node_types.CopyFrom(region_to_proto(slot.node_types))
    for name, region in slot.type_features.items():
        message.type_features[name].CopyFrom(region_to_proto(region))
    return message


def _slot_from_proto(m: channels_pb2.ChannelSlot) -> SlotLayout:
    return SlotLayout(
        index=m.index,
        generation=m.generation,
        capacity=SlotCapacity(nodes=m.capacity.nodes, edges=m.capacity.edges, expanded=m.capacity.expanded),
        memory=handle_from_proto(m.memory),
        node_ids=region_from_proto(m.node_ids),
        indptr=region_from_proto(m.indptr),
        indices=region_from_proto(m.indices),
        labels=region_from_proto(m.labels),
        features=region_from_proto(m.features) if m.HasField("features") else None,
        pairs=region_from_proto(m.pairs) if m.HasField("pairs") else None,
        edge_types=region_from_proto(m.edge_types) if m.HasField("edge_types") else None,
        node_types=region_from_proto(m.node_types) if m.HasField("node_types") else None,
        type_features={name: region_from_proto(region) for name, region in m.type_features.items()},
        ready_event=m.ready_event or None,
        released_event=m.released_event or None,
    )


def grant_to_proto(grant: ChannelGrant) -> channels_pb2.ChannelLayout:
    layout = grant.layout
    return channels_pb2.ChannelLayout(
        version=layout.version,
        channel=layout.channel,
        job_id=grant.job_id,
        rank=layout.rank,
        world_size=layout.world_size,
        slots=[_slot_to_proto(s) for s in layout.slots],
        control=segment_ref_to_proto(layout.control),
        error_text=segment_ref_to_proto(layout.error_text),
        socket_path=layout.socket_path,
        producer_pid=layout.producer_pid,
        producer_start_time=layout.producer_start_time,
        stall_timeout_seconds=grant.stall_timeout_s,
        dataset=layout.dataset,
        num_nodes=layout.num_nodes,
        feature_dim=grant.feature_dim,
        num_classes=grant.num_classes,
        fanouts=layout.fanouts,
        batch_size=layout.batch_size,
        steps_per_epoch=layout.steps_per_epoch,
        epochs=layout.epochs,
    )


def grant_from_proto(m: channels_pb2.ChannelLayout) -> ChannelGrant:
    layout = ChannelLayout(
        version=m.version,
        channel=m.channel,
        dataset=m.dataset,
        producer_pid=m.producer_pid,
        producer_start_time=m.producer_start_time,
        socket_path=m.socket_path,
        control=segment_ref_from_proto(m.control),
        error_text=segment_ref_from_proto(m.error_text),
        rank=m.rank,
        world_size=m.world_size,
        fanouts=list(m.fanouts),
        batch_size=m.batch_size,
        epochs=m.epochs,
        steps_per_epoch=m.steps_per_epoch,
        num_nodes=m.num_nodes,
        slots=[_slot_from_proto(s) for s in m.slots],
    )
    return ChannelGrant(m.job_id, layout, m.feature_dim, m.num_classes, m.stall_timeout_seconds)
