"""The wire form of memory handles and regions: `graphtier.v1` `MemoryHandle` and `Region` messages."""

from __future__ import annotations

from graphtier.service.memory.handle import MemoryHandle, Region
from graphtier.v1 import common_pb2

_OPTIONAL = ("shm_name", "ipc_handle", "export_socket", "export_id", "pci_bus_id")


def handle_to_proto(handle: MemoryHandle) -> common_pb2.MemoryHandle:
    values = {name: getattr(handle, name) for name in _OPTIONAL if getattr(handle, name) is not None}
    return common_pb2.MemoryHandle(
        location=handle.location, mechanism=handle.mechanism, nbytes=handle.nbytes, owner_pid=handle.owner_pid, **values
    )


def handle_from_proto(message: common_pb2.MemoryHandle) -> MemoryHandle:
    """The handle a message describes; pydantic's ValidationError names what is inconsistent."""
    return MemoryHandle(
        location=message.location,
        mechanism=message.mechanism,
        nbytes=message.nbytes,
        owner_pid=message.owner_pid,
        **{name: getattr(message, name) or None for name in _OPTIONAL},
    )


def region_to_proto(region: Region) -> common_pb2.Region:
    return common_pb2.Region(offset=region.offset, shape=list(region.shape), dtype=region.dtype)


def region_from_proto(message: common_pb2.Region) -> Region:
    return Region(offset=message.offset, shape=tuple(message.shape), dtype=message.dtype)
