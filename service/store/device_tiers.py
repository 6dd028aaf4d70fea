"""The device tiers of a loaded dataset: allocated by the daemon, opened by the consumers.

Daemon side, `DeviceTierSet` puts rows [0, replicated_end) on every tier GPU and share j of
the interleaved rows (row r with (r - replicated_end) % n == j) on GPU j, each in its own
device allocation of the memory-handle package (CUDA IPC, or VMM fds passed by the daemon's
`FdExporter`), filled once from the host copy; `refs` describes them for the dataset layout.
Consumer side, `open_cuda_tiers` opens the handles this GPU needs (its replica, every share it
can reach), registers the host tier, and returns the `CudaFeatureTiers` the gather reads;
`CudaTiersLease.close()` gives it all back.

The device structure tier is the same on the daemon's side, `DeviceStructureSet`: the CSC lists
of nodes [0, structure_device_end) (the hottest, so colptr[0..end] and a prefix of row) in one
allocation per array on every tier GPU, filled once; `open_cuda_tiers` maps this GPU's pair
into `CudaTiersLease.device_structure`, so every producer on the GPU reads the one copy.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import mmap
import os
import secrets
import time
from collections.abc import Sequence

import torch

from graphtier.contract.errors import GraphtierError
from graphtier.service.gpu.gather import CudaFeatureTiers
from graphtier.service.gpu.host_registry import HostRegistration, host_registry
from graphtier.service.gpu.runtime import (
    CudaError,
    can_access_peer,
    device_of_pci_bus_id,
    pci_bus_id,
    read_only_registration_supported,
)
from graphtier.service.memory import (
    DeviceMemoryMode,
    FdExporter,
    SharedMemory,
    allocate,
    copy_host_to_device,
    fetch_fds,
    open_memory,
)
from graphtier.service.placement import PlacementPlan
from graphtier.service.shm import SegmentRef
from graphtier.service.shm.ref import map_fd
from graphtier.service.store.tier_ref import DeviceTierRef

log = logging.getLogger("graphtier.gpu")

_FILL_CHUNK_BYTES = 256 << 20


def peer_matrix_complete(devices: Sequence[int]) -> bool:
    """True when every tier GPU can read every other one's memory (the interleaved tier needs it)."""
    return all(can_access_peer(a, b) for a in devices for b in devices if a != b)


def _allocate_filled(
    name: str, source: torch.Tensor, device: int, mode: DeviceMemoryMode, exporter: FdExporter | None
) -> SharedMemory:
    """A device allocation of the memory-handle package holding the bytes of `source` (a 2-D uint8
    view of rows, copied in chunks so a strided share is packed a chunk at a time)."""
    nbytes = source.numel()
    memory = allocate(name, max(nbytes, 1), device=device, mode=mode, exporter=exporter)  # a share may be empty
    try:
        per_chunk = max(1, _FILL_CHUNK_BYTES // max(source.shape[1], 1))
        for first in range(0, source.shape[0], per_chunk):
            copy_host_to_device(memory, first * source.shape[1], source[first : first + per_chunk].contiguous())
    except BaseException:
        memory.close()
        raise
    return memory


def _close_all(allocations: Sequence[SharedMemory]) -> None:
    """Free every allocation, then raise the first failure (a failed free must not leak the rest)."""
    errors: list[BaseException] = []
    for memory in allocations:
        try:
            memory.close()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


class DeviceTierSet:
    """The daemon's allocations of one dataset's device tiers; `close()` frees them."""

    def __init__(
        self,
        plan: PlacementPlan,
        resident: torch.Tensor,
        devices: Sequence[int],
        label: str,
        *,
        mode: DeviceMemoryMode = "ipc",
        exporter: FdExporter | None = None,
    ) -> None:
        """`mode`: share the allocations as CUDA IPC handles or (vmm) as POSIX fds that `exporter` passes."""
        if len(devices) != plan.num_devices:
            raise GraphtierError(f"the plan spans {plan.num_devices} devices but {len(devices)} GPUs were given")
        self.mode, self.exporter = mode, exporter
        self.allocations: list[SharedMemory] = []
        self.refs: list[DeviceTierRef] = []
        rows = resident.reshape(resident.shape[0], -1).view(torch.uint8)  # [host_end, row_bytes] bytes
        t0 = time.perf_counter()
        try:
            for slot, device in enumerate(devices):
                if plan.replicated_end:
                    self._place("replicated", slot, device, rows[: plan.replicated_end], label)
                if plan.interleaved_end > plan.replicated_end:
                    share = rows[plan.replicated_end + slot : plan.interleaved_end : plan.num_devices]
                    self._place("interleaved", slot, device, share, label)
        except BaseException:
            self.close()
            raise
        if self.allocations:
            log.info(
                "placed device tiers of %s on GPUs %s: %.1f MiB in %.2f s",
                label,
                list(devices),
                sum(a.handle.nbytes for a in self.allocations) / 2**20,
                time.perf_counter() - t0,
            )

    def _place(self, tier: str, slot: int, device: int, rows: torch.Tensor, label: str) -> None:
        # the name is unique: it is also the fd's export id under vmm
        name = f"{label}-{tier}-{slot}-{secrets.token_hex(4)}"
        memory = _allocate_filled(name, rows, device, self.mode, self.exporter)
        self.allocations.append(memory)
        handle = memory.handle.model_copy(update={"nbytes": rows.numel()})
        self.refs.append(DeviceTierRef(tier=tier, slot=slot, rows=rows.shape[0], memory=handle))

    def close(self) -> None:
        allocations, self.allocations, self.refs = self.allocations, [], []
        _close_all(allocations)


def structure_prefix(plan: PlacementPlan, colptr: torch.Tensor, row: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The device structure tier's contents: colptr[0..structure_device_end] and the row entries of
    those nodes' lists (a prefix of `row`); GraphtierError when the CSC does not match the plan."""
    end, edges = plan.structure_device_end, plan.structure_device_edges
    if colptr.numel() != plan.num_nodes + 1 or (end and int(colptr[end]) != edges) or row.numel() < edges:
        raise GraphtierError(
            f"the CSC ({colptr.numel()} colptr, {row.numel()} row entries) does not match the plan's structure tier "
            f"({plan.num_nodes} nodes, the first {end} with {edges} edges)"
        )
    return colptr[: end + 1], row[:edges]


class DeviceStructureSet:
    """The daemon's allocations of one dataset's device structure tier: this GPU's copy of the
    hottest nodes' CSC lists on every tier GPU, shared like the feature tiers (`mode`, `exporter`);
    `refs` describe them, `close()` frees them."""

    def __init__(
        self,
        plan: PlacementPlan,
        colptr: torch.Tensor,
        row: torch.Tensor,
        devices: Sequence[int],
        label: str,
        *,
        mode: DeviceMemoryMode = "ipc",
        exporter: FdExporter | None = None,
    ) -> None:
        self.mode, self.exporter = mode, exporter
        self.allocations: list[SharedMemory] = []
        self.refs: list[DeviceTierRef] = []
        if not plan.structure_device_end:
            return
        parts = dict(zip(("structure_colptr", "structure_row"), structure_prefix(plan, colptr, row), strict=True))
        t0 = time.perf_counter()
        try:
            for slot, device in enumerate(devices):
                for tier, values in parts.items():
                    self._place(tier, slot, device, values.contiguous(), label)
        except BaseException:
            self.close()
            raise
        log.info(
            "placed the structure of %s's %d hottest nodes on GPUs %s: %.1f MiB each in %.2f s",
            label,
            plan.structure_device_end,
            list(devices),
            plan.structure_device_bytes / 2**20,
            time.perf_counter() - t0,
        )

    def _place(self, tier: str, slot: int, device: int, values: torch.Tensor, label: str) -> None:
        name = f"{label}-{tier}-{slot}-{secrets.token_hex(4)}"
        memory = _allocate_filled(name, values.view(torch.uint8).view(1, -1), device, self.mode, self.exporter)
        self.allocations.append(memory)
        handle = memory.handle.model_copy(update={"nbytes": values.numel() * values.element_size()})
        self.refs.append(DeviceTierRef(tier=tier, slot=slot, rows=values.numel(), memory=handle))

    def close(self) -> None:
        allocations, self.allocations, self.refs = self.allocations, [], []
        _close_all(allocations)


class CudaTiersLease:
    """What one process mapped to read a dataset's tiers on GPU `device`; `close()` releases it."""

    def __init__(self, device: int, fd_socket: str | None = None) -> None:
        self.device = device
        self.fd_socket = fd_socket
        self.tiers: CudaFeatureTiers | None = None
        self.structure: tuple[torch.Tensor, torch.Tensor] | None = None
        self._memory: list[SharedMemory] = []
        # the daemon's device structure tier on this GPU: (colptr[0..end], row[0:edges]), or None
        self.device_structure: tuple[torch.Tensor, torch.Tensor] | None = None
        self._registrations: list[HostRegistration] = []
        self._writable: list[mmap.mmap] = []

    def open_handle(self, ref: DeviceTierRef, device: int) -> int:
        """Map the device tier allocation `ref` on GPU `device`; its device address."""
        memory = open_memory(ref.memory, device=device)
        self._memory.append(memory)
        return memory.ptr  # type: ignore[attr-defined]  # a device handle's memory has one; host memory none

    def register(self, tensor: torch.Tensor, label: str, ref: SegmentRef | None = None) -> int:
        """Register the host pages of `tensor` (a read-only mapping of segment `ref`) for this GPU;
        the device address of its first byte. A GPU that cannot register read-only memory gets a
        writable mapping of the same segment from a read-write fd the owner passes over its
        `fd_socket` (the sealed 0400 file itself is never reopened for writing)."""
        nbytes = tensor.numel() * tensor.element_size()
        if read_only_registration_supported(self.device) or ref is None:
            self._registrations.append(host_registry().register(tensor.data_ptr(), nbytes, label, device=self.device))
            return tensor.data_ptr()
        if self.fd_socket is None:
            raise CudaError(
                f"cannot register {label}: GPU {self.device} cannot register read-only host memory and the dataset's "
                "owner serves no read-write fds (its layout has no fd_socket)"
            )
        (fd,) = fetch_fds(self.fd_socket, [ref.name])
        try:
            mapping = map_fd(fd, writable=True)
        finally:
            os.close(fd)
        self._writable.append(mapping)
        base = ctypes.addressof(ctypes.c_char.from_buffer(mapping))
        reg = host_registry().register(base + ref.offset, nbytes, label, device=self.device, read_only=False)
        self._registrations.append(reg)
        return base + ref.offset

    def register_view(self, tensor: torch.Tensor, label: str, ref: SegmentRef | None = None) -> torch.Tensor:
        """Register `tensor`'s host pages and return a CUDA view of the same bytes (no copy)."""
        from graphtier.service.gpu.views import cuda_view

        if tensor.numel() == 0:
            return torch.empty(tensor.shape, dtype=tensor.dtype, device=f"cuda:{self.device}")
        ptr = self.register(tensor, label, ref)
        return cuda_view(ptr, tuple(tensor.shape), tensor.dtype, self.device, owner=tensor)

    def close(self) -> None:
        """Wait for this GPU's work (a gather may still read the mappings), then release everything;
        every release is attempted, and the first failure is raised after the last."""
        memory, self._memory = self._memory, []
        registrations, self._registrations = self._registrations, []
        writable, self._writable = self._writable, []
        self.tiers = self.structure = self.device_structure = None
        errors: list[BaseException] = []
        if memory or registrations:
            try:
                torch.cuda.synchronize(self.device)
            except Exception as exc:  # a sticky error must not stop the releases
                errors.append(exc)
        for opened in memory:
            try:
                opened.close()
            except Exception as exc:
                errors.append(exc)
        for reg in registrations:
            try:
                host_registry().release(reg)
            except Exception as exc:
                errors.append(exc)
        for mapping in writable:
            with contextlib.suppress(BufferError):  # a view still exported: the mapping goes with it
                mapping.close()
        if errors:
            raise errors[0]


def open_cuda_tiers(
    plan: PlacementPlan,
    refs: Sequence[DeviceTierRef],
    resident: torch.Tensor | None,
    storage: torch.Tensor | None,
    device: int,
    *,
    label: str,
    resident_ref: SegmentRef | None = None,
    fd_socket: str | None = None,
) -> CudaTiersLease:
    """Map everything GPU `device` of this process needs to gather `plan`'s rows (`fd_socket`: where
    the owner passes read-write fds, for a GPU that cannot register read-only host memory)."""
    lease = CudaTiersLease(device, fd_socket)
    try:
        some = resident if resident is not None else storage
        if some is None:
            raise GraphtierError(f"dataset {label!r} has no node features to gather")
        structure_refs = [ref for ref in refs if ref.tier.startswith("structure_")]
        refs = [ref for ref in refs if not ref.tier.startswith("structure_")]
        if not refs and plan.interleaved_end:
            # The daemon kept the device tiers accounted (no GPU there, or gpu_tiers off): on this GPU
            # every resident row is read from host memory, and counted as what it really is.
            plan = plan.model_copy(update={"replicated_end": 0, "interleaved_end": 0, "num_devices": 1})
        here = pci_bus_id(device)
        lease.device_structure = _open_structure(lease, structure_refs, here, device)
        tier_slots = {ref.slot: ref.pci_bus_id for ref in refs}
        slot = next((s for s, bus in tier_slots.items() if bus == here), None)
        if (plan.replicated_end or plan.interleaved_end) and slot is None:
            raise GraphtierError(
                f"GPU {device} ({here}) holds no device tier of {label!r} (tier GPUs: "
                f"{', '.join(sorted(set(tier_slots.values()))) or 'none'}); train on those GPUs or load the "
                "dataset with num_devices covering every rank's GPU"
            )
        replicated = 0
        shares = [0] * max(plan.num_devices, 1)
        for ref in refs:
            if ref.tier == "replicated" and ref.slot == slot:
                replicated = lease.open_handle(ref, device)
            elif ref.tier == "interleaved" and ref.rows:
                try:
                    owner = device_of_pci_bus_id(ref.pci_bus_id)
                    reachable = owner == device or can_access_peer(device, owner)
                except CudaError:  # not visible here (CUDA_VISIBLE_DEVICES): IPC may still map it
                    reachable = True
                if reachable:
                    try:
                        shares[ref.slot] = lease.open_handle(ref, device)
                    except CudaError as exc:
                        log.warning("%s: interleaved share %d is read from the host copy: %s", label, ref.slot, exc)
        host_ptr = 0
        if resident is not None and resident.numel():
            host_ptr = lease.register(resident, f"{label} host tier", resident_ref)
        lease.tiers = CudaFeatureTiers(
            device=torch.device("cuda", device),
            replicated_end=plan.replicated_end,
            interleaved_end=plan.interleaved_end,
            host_end=plan.host_end,
            num_rows=plan.num_nodes,
            num_devices=max(plan.num_devices, 1),
            device_index=slot or 0,
            dtype=some.dtype,
            row_shape=tuple(some.shape[1:]),
            replicated_ptr=replicated,
            interleaved_ptrs=tuple(shares),
            host_ptr=host_ptr,
            storage=storage,
        )
        return lease
    except BaseException:
        lease.close()
        raise


def _open_structure(
    lease: CudaTiersLease, refs: Sequence[DeviceTierRef], here: str, device: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """This GPU's copy of the device structure tier as CUDA views (None when the daemon placed
    none here: the sampler then reads every list from the host copy)."""
    from graphtier.service.gpu.views import cuda_view

    mine = {ref.tier: ref for ref in refs if ref.pci_bus_id == here}
    if set(mine) != {"structure_colptr", "structure_row"}:
        return None
    views = []
    for tier in ("structure_colptr", "structure_row"):
        ref = mine[tier]
        ptr = lease.open_handle(ref, device)
        views.append(cuda_view(ptr, (ref.rows,), torch.int64, device))
    return views[0], views[1]
