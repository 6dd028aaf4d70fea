"""Memory handles: the one way graphtier allocates, exports, opens and closes shared memory.

A `MemoryHandle` names a location (host shared memory, or a GPU) and a sharing mechanism (a
shm segment name, a CUDA IPC handle, a CUDA VMM allocation passed as a POSIX fd over a Unix
socket); a `Region` is a tensor inside one. The dataset tiers and the producers' ping-pong slots
are handles, so the daemon, producers and ranks share memory through `allocate` and
`open_memory` alone, and the code above them is the same on a CPU machine (every handle host)
and a GPU one. Nothing here touches CUDA until a device handle is allocated or opened.
(The design follows cugraph-gnn WholeMemory's memory handle.)
"""

from graphtier.service.memory.access import SharedMemory, allocate, copy_host_to_device, open_memory
from graphtier.service.memory.fd_passing import FdExporter, fetch_fds
from graphtier.service.memory.handle import DEVICE_MECHANISM, DeviceMemoryMode, MemoryHandle, Region
from graphtier.service.memory.host import HostAllocation, HostMapping

__all__ = [
    "DEVICE_MECHANISM",
    "DeviceMemoryMode",
    "FdExporter",
    "HostAllocation",
    "HostMapping",
    "MemoryHandle",
    "Region",
    "SharedMemory",
    "allocate",
    "copy_host_to_device",
    "fetch_fds",
    "open_memory",
]
