"""`MemoryHandle`: one block of shared memory as another process finds it, and `Region`, a tensor in it.

A handle says where the memory is (`location`: host shared memory or a GPU) and how another
process opens it (`mechanism`): a POSIX shm segment name; a CUDA IPC handle (64 bytes, legacy
`cudaIpcGetMemHandle`); or a CUDA VMM allocation exported as a POSIX fd, fetched by `export_id`
from the exporter's Unix socket (`fd_passing.py`), which works across PID namespaces where legacy
IPC handles do not. A `Region` is a C-contiguous tensor at a byte offset of a handle. Plain
pydantic, no CUDA; the wire forms (`wire.py`) mirror them field for field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graphtier.service.shm.naming import SegmentName
from graphtier.service.shm.ref import TensorPlacement

Location = Literal["host", "device"]
Mechanism = Literal["shm", "cuda_ipc", "vmm_fd"]
DeviceMemoryMode = Literal["ipc", "vmm"]
"""How a daemon shares the device memory it allocates: legacy CUDA IPC handles or VMM fds."""

IPC_HANDLE_HEX = 128  # a cudaIpcMemHandle_t / cudaIpcEventHandle_t is 64 bytes
MECHANISMS_BY_LOCATION: dict[str, tuple[str, ...]] = {"host": ("shm",), "device": ("cuda_ipc", "vmm_fd")}
DEVICE_MECHANISM: dict[str, Mechanism] = {"ipc": "cuda_ipc", "vmm": "vmm_fd"}


class MemoryHandle(BaseModel):
    """One shared allocation: where it lives, how to open it, how big it is and who owns it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    location: Location = Field(description="host: POSIX shared memory; device: memory of the GPU `pci_bus_id`.")
    mechanism: Mechanism = Field(description="shm (segment name), cuda_ipc (IPC handle) or vmm_fd (POSIX fd).")
    nbytes: int = Field(ge=0, description="Usable bytes (a device allocation may be padded beyond them).")
    owner_pid: int = Field(ge=0, description="The process that allocated the memory and frees it.")
    shm_name: str | None = Field(default=None, description="shm: the segment file name under /dev/shm.")
    ipc_handle: str | None = Field(default=None, description="cuda_ipc: the 64 handle bytes, lowercase hex.")
    export_socket: str | None = Field(default=None, description="vmm_fd: Unix socket the owner passes fds on.")
    export_id: str | None = Field(default=None, description="vmm_fd: the name the owner exports the fd under.")
    pci_bus_id: str | None = Field(
        default=None, max_length=32, description="device: the GPU by PCI bus id (the same under any visible set)."
    )

    @field_validator("shm_name")
    @classmethod
    def _check_shm_name(cls, name: str | None) -> str | None:
        # Handles arrive over the network: only a well-formed segment name may become a path.
        if name is not None and SegmentName.parse(name) is None:
            raise ValueError(f"{name!r} is not a graphtier segment name")
        return name

    @field_validator("ipc_handle")
    @classmethod
    def _check_ipc_handle(cls, text: str | None) -> str | None:
        if text is not None and (len(text) != IPC_HANDLE_HEX or text.strip("0123456789abcdef")):
            raise ValueError(f"a CUDA IPC handle is {IPC_HANDLE_HEX} lowercase hex digits, got {text[:20]!r}...")
        return text

    @model_validator(mode="after")
    def _check_mechanism(self) -> MemoryHandle:
        if self.mechanism not in MECHANISMS_BY_LOCATION[self.location]:
            raise ValueError(f"{self.location} memory cannot be shared by {self.mechanism}")
        needed = {
            "shm": ("shm_name",),
            "cuda_ipc": ("ipc_handle", "pci_bus_id"),
            "vmm_fd": ("export_socket", "export_id", "pci_bus_id"),
        }[self.mechanism]
        missing = [name for name in needed if not getattr(self, name)]
        if missing:
            raise ValueError(f"a {self.mechanism} handle needs {', '.join(missing)}")
        extra = [
            name
            for name in ("shm_name", "ipc_handle", "export_socket", "export_id", "pci_bus_id")
            if name not in needed and getattr(self, name) is not None
        ]
        if extra:
            raise ValueError(f"a {self.mechanism} handle carries no {', '.join(extra)}")
        return self

    @property
    def label(self) -> str:
        """A short name for messages."""
        where = self.shm_name or self.export_id or f"IPC handle {(self.ipc_handle or '')[:12]}"
        return f"{self.location} memory {where}" + (f" on GPU {self.pci_bus_id}" if self.pci_bus_id else "")


class Region(TensorPlacement):
    """`shape`/`dtype` elements, C-contiguous, from byte `offset` of a handle."""
