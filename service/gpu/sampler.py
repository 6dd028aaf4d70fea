"""Neighbour sampling on the GPU over a tiered CSC, bit-identical to the CPU sampler.

`CudaNeighborSampler(structure, fanouts).sample(seeds, seed=...)` returns the same
`SampledSubgraph` as `NeighborSampler(graph, fanouts).sample(seeds, seed=...)`, with its
tensors on the GPU. The CSC's hottest nodes (ids below `StructureTiers.device_end`) are read
from a device tier and the rest from registered host memory in place (zero-copy); the kernels
(native/cuda/neighbor_sampler.cu) draw the same counter-based numbers per (seed, node, draw)
and relabel in the same first-occurrence order as the CPU sampler.

A hop is `sample_hop`: six kernel launches and two cumsums on the current stream. The host
reads two scalars per hop (the hop's edge count and new-node count, to size the outputs);
no sampled data goes through the host. `sample_hops` runs the hops over any `SamplerKernels`,
so the CPU emulation of the kernels (tests/service/gpu) exercises this very orchestration.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from graphtier.contract.errors import SamplingError
from graphtier.contract.fanouts import validate_fanouts
from graphtier.service.gpu.gather import _ERR_NAMES, load_cuda_ops
from graphtier.service.gpu.runtime import CudaError
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.sampling.subgraph import SampledSubgraph

THREADS = 256


def unavailable_reason() -> str:
    """Why the GPU sampler cannot run in this process ("" when it can): no CUDA device, or the GPU ops not built."""
    try:
        load_cuda_ops()
    except CudaError as exc:
        return str(exc)
    return ""


@dataclass(frozen=True)
class StructureTiers:
    """The CSC as one device reads it: the lists of nodes [0, device_end) from `device_colptr`
    (device_end + 1 entries) and `device_row` (their colptr[device_end] entries), every other
    node's from `host_colptr`/`host_row` (the whole CSC, read in place). All four are 1-D
    contiguous int64 tensors on one device (CUDA for the GPU sampler; the CPU for its emulation).
    """

    device_colptr: torch.Tensor
    device_row: torch.Tensor
    host_colptr: torch.Tensor
    host_row: torch.Tensor

    def __post_init__(self) -> None:
        parts = {
            "device_colptr": self.device_colptr,
            "device_row": self.device_row,
            "host_colptr": self.host_colptr,
            "host_row": self.host_row,
        }
        for name, t in parts.items():
            if not isinstance(t, torch.Tensor) or t.dtype != torch.int64 or t.dim() != 1 or not t.is_contiguous():
                raise SamplingError(f"structure {name} must be a contiguous 1-D int64 tensor, got {t!r:.80}")
            if t.device != self.host_colptr.device:
                raise SamplingError(f"structure {name} is on {t.device}, host_colptr on {self.host_colptr.device}")
        if self.host_colptr.numel() < 1 or int(self.host_colptr[0]) != 0:
            raise SamplingError("structure host_colptr must start at 0")
        if int(self.host_colptr[-1]) != self.host_row.numel():
            raise SamplingError(
                f"structure host_colptr ends at {int(self.host_colptr[-1])} but host_row has "
                f"{self.host_row.numel()} entries"
            )
        end = self.device_colptr.numel() - 1
        if not 0 <= end <= self.num_nodes:
            raise SamplingError(
                f"structure device_colptr has {end + 1} entries, more than num_nodes + 1 = {self.num_nodes + 1}"
            )
        edges = int(self.device_colptr[-1]) if end >= 0 else 0
        if end >= 0 and (edges != int(self.host_colptr[end]) or self.device_row.numel() != edges):
            raise SamplingError(
                f"the device tier of {end} nodes holds {self.device_row.numel()} row entries and ends its colptr at "
                f"{edges}, but the CSC's first {end} lists have {int(self.host_colptr[end])}"
            )

    @classmethod
    def host_only(cls, graph: CSCGraph) -> StructureTiers:
        """Every list read from `graph` (registered host memory seen from the device): no device tier."""
        empty = torch.zeros(1, dtype=torch.int64, device=graph.colptr.device)
        return cls(device_colptr=empty, device_row=empty[:0], host_colptr=graph.colptr, host_row=graph.row)

    @classmethod
    def with_device_prefix(cls, graph: CSCGraph, device_end: int) -> StructureTiers:
        """The lists of nodes [0, device_end) copied into memory of `graph`'s device, the rest read from `graph`."""
        if not 0 <= device_end <= graph.num_nodes:
            raise SamplingError(f"device_end {device_end} is outside [0, {graph.num_nodes}]")
        colptr = graph.colptr[: device_end + 1].clone()
        row = graph.row[: int(colptr[-1])].clone()
        return cls(device_colptr=colptr, device_row=row, host_colptr=graph.colptr, host_row=graph.row)

    @property
    def device(self) -> torch.device:
        return self.host_colptr.device

    @property
    def device_end(self) -> int:
        """Nodes [0, device_end) have their lists in the device tier."""
        return self.device_colptr.numel() - 1

    @property
    def num_nodes(self) -> int:
        return self.host_colptr.numel() - 1

    @property
    def device_bytes(self) -> int:
        """Bytes of the device tier (colptr and row entries)."""
        return 8 * (self.device_colptr.numel() + self.device_row.numel()) if self.device_end else 0


class SamplerKernels(Protocol):
    """The six steps of a hop (see native/include/graphtier/cuda_sampler.h), enqueued in order."""

    def degrees(
        self, frontier: torch.Tensor, fanout: int, starts: torch.Tensor, degrees: torch.Tensor, counts: torch.Tensor
    ) -> None: ...

    def pick(
        self,
        frontier: torch.Tensor,
        fanout: int,
        seed: int,
        first_local: int,
        starts: torch.Tensor,
        degrees: torch.Tensor,
        ends: torch.Tensor,
        out: torch.Tensor,
    ) -> None: ...

    def mark(self, nbrs: torch.Tensor, node_map: torch.Tensor) -> None: ...

    def flag(self, nbrs: torch.Tensor, node_map: torch.Tensor, flags: torch.Tensor) -> None: ...

    def assign(
        self,
        nbrs: torch.Tensor,
        flags: torch.Tensor,
        ranks: torch.Tensor,
        next_local: int,
        node_map: torch.Tensor,
        new_nodes: torch.Tensor,
    ) -> None: ...

    def apply(self, nbrs: torch.Tensor, node_map: torch.Tensor, local: torch.Tensor) -> None: ...


@dataclass
class HopResult:
    """One hop's output: edge ends (from 0), local source ids of its edges, its new nodes."""

    ends: torch.Tensor
    indices: torch.Tensor
    new_nodes: torch.Tensor


def sample_hop(
    kernels: SamplerKernels,
    frontier: torch.Tensor,
    fanout: int,
    seed: int,
    first_local: int,
    next_local: int,
    node_map: torch.Tensor,
) -> HopResult:
    """Expand `frontier` (local ids first_local.. in order) by `fanout`; new nodes get local ids
    from `next_local` and enter `node_map`. `seed` is the sampler seed as a signed 64-bit word."""
    dev, n = frontier.device, frontier.numel()
    starts, degrees, counts = (torch.empty(n, dtype=torch.int64, device=dev) for _ in range(3))
    kernels.degrees(frontier, fanout, starts, degrees, counts)
    ends = torch.cumsum(counts, 0)
    total = int(ends[-1]) if n else 0  # host read 1: the hop's edge count
    nbrs = torch.empty(total, dtype=torch.int64, device=dev)
    kernels.pick(frontier, fanout, seed, first_local, starts, degrees, ends, nbrs)
    kernels.mark(nbrs, node_map)
    flags = torch.empty(total, dtype=torch.int64, device=dev)
    kernels.flag(nbrs, node_map, flags)
    ranks = torch.cumsum(flags, 0)
    fresh = int(ranks[-1]) if total else 0  # host read 2: the hop's new nodes
    new_nodes = torch.empty(fresh, dtype=torch.int64, device=dev)
    kernels.assign(nbrs, flags, ranks, next_local, node_map, new_nodes)
    local = torch.empty_like(nbrs)  # not in place: the op's schema keeps its input and output apart
    kernels.apply(nbrs, node_map, local)
    return HopResult(ends=ends, indices=local, new_nodes=new_nodes)


def sample_hops(
    kernels: SamplerKernels, seeds: torch.Tensor, fanouts: Sequence[int], seed: int, node_map: torch.Tensor
) -> SampledSubgraph:
    """All hops around `seeds` (unique, in range, on the node map's device); `node_map` (int64,
    all -1) is all -1 again on return, also on error."""
    dev, batch = seeds.device, seeds.numel()
    node_map[seeds] = torch.arange(batch, dtype=torch.int64, device=dev)
    chunks, indptr_parts, index_parts = [seeds], [torch.zeros(1, dtype=torch.int64, device=dev)], []
    nodes_per_hop, edges_per_hop = [batch], []
    frontier, first_local, next_local, edge_base = seeds, 0, batch, 0
    try:
        for k in fanouts:
            hop = sample_hop(kernels, frontier, k, seed, first_local, next_local, node_map)
            total = hop.indices.numel()
            index_parts.append(hop.indices)
            indptr_parts.append(hop.ends + edge_base)
            chunks.append(hop.new_nodes)
            nodes_per_hop.append(hop.new_nodes.numel())
            edges_per_hop.append(total)
            edge_base += total
            frontier, first_local = hop.new_nodes, next_local
            next_local += hop.new_nodes.numel()
        node_ids = torch.cat(chunks)
    except BaseException:
        node_map.fill_(-1)  # marks of an unfinished hop are not in any chunk
        raise
    node_map[node_ids] = -1
    indices = torch.cat(index_parts) if index_parts else torch.empty(0, dtype=torch.int64, device=dev)
    return SampledSubgraph(
        node_ids=node_ids,
        indptr=torch.cat(indptr_parts),
        indices=indices,
        num_nodes_per_hop=nodes_per_hop,
        num_edges_per_hop=edges_per_hop,
    )


class CudaSamplerKernels:
    """The hop's steps as launches of torch.ops.graphtier_cuda.* on the current stream."""

    def __init__(self, structure: StructureTiers, *, max_blocks: int, threads: int = THREADS) -> None:
        s = structure
        self._pointers = torch.tensor(
            [s.device_colptr.data_ptr(), s.device_row.data_ptr(), s.host_colptr.data_ptr(), s.host_row.data_ptr()],
            dtype=torch.int64,
        )
        self._bounds = torch.tensor([s.device_end, s.num_nodes], dtype=torch.int64)
        self.max_blocks, self.threads = max_blocks, threads

    @staticmethod
    def _check(err: int, what: str) -> None:
        if err:
            raise CudaError(f"{what} kernel launch failed: {_ERR_NAMES.get(err, 'cudaError')} ({err})")

    def degrees(
        self, frontier: torch.Tensor, fanout: int, starts: torch.Tensor, degrees: torch.Tensor, counts: torch.Tensor
    ) -> None:
        ops = torch.ops.graphtier_cuda
        self._check(
            ops.sample_degrees(
                frontier, self._pointers, self._bounds, fanout, starts, degrees, counts, self.max_blocks, self.threads
            ),
            "sample_degrees",
        )

    def pick(
        self,
        frontier: torch.Tensor,
        fanout: int,
        seed: int,
        first_local: int,
        starts: torch.Tensor,
        degrees: torch.Tensor,
        ends: torch.Tensor,
        out: torch.Tensor,
    ) -> None:
        ops = torch.ops.graphtier_cuda
        self._check(
            ops.sample_pick(
                frontier,
                self._pointers,
                self._bounds,
                fanout,
                seed,
                first_local,
                starts,
                degrees,
                ends,
                out,
                self.max_blocks,
                self.threads,
            ),
            "sample_pick",
        )

    def mark(self, nbrs: torch.Tensor, node_map: torch.Tensor) -> None:
        self._check(
            torch.ops.graphtier_cuda.relabel_mark(nbrs, node_map, self.max_blocks, self.threads), "relabel_mark"
        )

    def flag(self, nbrs: torch.Tensor, node_map: torch.Tensor, flags: torch.Tensor) -> None:
        self._check(
            torch.ops.graphtier_cuda.relabel_flag(nbrs, node_map, flags, self.max_blocks, self.threads), "relabel_flag"
        )

    def assign(
        self,
        nbrs: torch.Tensor,
        flags: torch.Tensor,
        ranks: torch.Tensor,
        next_local: int,
        node_map: torch.Tensor,
        new_nodes: torch.Tensor,
    ) -> None:
        ops = torch.ops.graphtier_cuda
        self._check(
            ops.relabel_assign(nbrs, flags, ranks, next_local, node_map, new_nodes, self.max_blocks, self.threads),
            "relabel_assign",
        )

    def apply(self, nbrs: torch.Tensor, node_map: torch.Tensor, local: torch.Tensor) -> None:
        self._check(
            torch.ops.graphtier_cuda.relabel_apply(nbrs, node_map, local, self.max_blocks, self.threads),
            "relabel_apply",
        )


def check_seeds(seeds: torch.Tensor, num_nodes: int, device: torch.device) -> torch.Tensor:
    """`seeds` as a contiguous int64 tensor on `device`; SamplingError naming a seed out of
    range or repeated (the CPU sampler's checks and wording)."""
    if not isinstance(seeds, torch.Tensor):
        raise SamplingError(f"seeds must be a 1-D int64 tensor, got {type(seeds).__name__}")
    if seeds.dim() != 1 or seeds.dtype.is_floating_point or seeds.dtype.is_complex or seeds.dtype == torch.bool:
        raise SamplingError(f"seeds must be a 1-D integer tensor, got {seeds.dtype} of shape {tuple(seeds.shape)}")
    seeds = seeds.to(device=device, dtype=torch.int64).contiguous()
    if seeds.numel():
        lo, hi = (int(v) for v in torch.aminmax(seeds))
        if lo < 0 or hi >= num_nodes:
            pos = int(((seeds < 0) | (seeds >= num_nodes)).nonzero()[0])
            raise SamplingError(f"seed {int(seeds[pos])} at position {pos} is out of range [0, {num_nodes})")
        ordered = seeds.sort().values
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        if repeated.numel():
            raise SamplingError(f"seed {int(repeated[0])} appears more than once; seeds must be unique")
    return seeds


def seed_word(seed: int) -> int:
    """The sampler seed (any int, mod 2**64) as the signed 64-bit word the kernels take."""
    try:
        word = operator.index(seed)
    except TypeError:
        raise SamplingError(f"seed must be an int, got {seed!r}") from None
    word &= (1 << 64) - 1
    return word - (1 << 64) if word >= 1 << 63 else word


class CudaNeighborSampler:
    """Samples k-hop subgraphs on one GPU, the same ones as `NeighborSampler` on the CPU.

    Holds a device node map of N int64 entries reused by every call: one instance per thread
    (one per producer). `sm_share` caps the grid to about that share of the SMs.
    """

    def __init__(self, structure: StructureTiers, fanouts: Sequence[int], *, sm_share: float | None = None) -> None:
        load_cuda_ops()
        if structure.device.type != "cuda":
            raise SamplingError(f"the structure must be seen from a CUDA device, not {structure.device}")
        if sm_share is not None and not 0 < sm_share <= 1:
            raise SamplingError(f"sm_share must be in (0, 1], got {sm_share}")
        self._fanouts = validate_fanouts(fanouts)
        self._structure = structure
        sms = torch.cuda.get_device_properties(structure.device).multi_processor_count
        blocks = sms * (2048 // THREADS) if sm_share is None else max(1, round(sms * sm_share * 1024 / THREADS))
        self._kernels = CudaSamplerKernels(structure, max_blocks=blocks)
        self._node_map = torch.full((structure.num_nodes,), -1, dtype=torch.int64, device=structure.device)

    @property
    def backend(self) -> str:
        """'cuda': the implementation this sampler runs."""
        return "cuda"

    @property
    def fanouts(self) -> list[int]:
        return list(self._fanouts)

    @property
    def structure(self) -> StructureTiers:
        return self._structure

    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph:
        """Sample around `seeds` (unique global ids, CPU or this GPU) with randomness fixed by
        `seed`; the subgraph's tensors are on the GPU, enqueued on the current stream."""
        s = self._structure
        word = seed_word(seed)
        seeds = check_seeds(seeds, s.num_nodes, s.device)
        with torch.cuda.device(s.device):
            return sample_hops(self._kernels, seeds, self._fanouts, word, self._node_map)


class HostCopySampler:
    """A `CudaNeighborSampler` whose samples are copied back to host memory: for a producer that
    gathers on the CPU, which reads the subgraph there. Same API as `NeighborSampler`."""

    def __init__(self, sampler: CudaNeighborSampler) -> None:
        self.device_sampler = sampler

    @property
    def backend(self) -> str:
        return "cuda"

    @property
    def fanouts(self) -> list[int]:
        return self.device_sampler.fanouts

    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph:
        sub = self.device_sampler.sample(seeds, seed=seed)
        return SampledSubgraph(
            node_ids=sub.node_ids.cpu(),
            indptr=sub.indptr.cpu(),
            indices=sub.indices.cpu(),
            num_nodes_per_hop=sub.num_nodes_per_hop,
            num_edges_per_hop=sub.num_edges_per_hop,
        )


def tiered_structure(host: CSCGraph, device_structure: tuple[torch.Tensor, torch.Tensor] | None) -> StructureTiers:
    """The CSC as the sampler reads it: the device structure tier (colptr[0..end], row[0:edges] of
    the hottest nodes, as the daemon placed it) where there is one, every other list from `host`
    (the whole CSC, read in place); `host` alone when the daemon placed no structure here."""
    if device_structure is None:
        return StructureTiers.host_only(host)
    colptr, row = device_structure
    return StructureTiers(device_colptr=colptr, device_row=row, host_colptr=host.colptr, host_row=host.row)


class MappedStructureTier(Protocol):
    """What the GPU sampler reads of a process's mapping of a dataset on one GPU
    (`service.store.device_tiers.CudaTiersLease`): the device structure tier, or None."""

    device_structure: tuple[torch.Tensor, torch.Tensor] | None


class AttachedStructure(Protocol):
    """What the GPU sampler needs of an attached dataset (`service.store.AttachedDataset`)."""

    def cuda_structure(self, device: int) -> CSCGraph: ...

    def cuda_tiers(self, device: int) -> MappedStructureTier: ...


def dataset_structure(dataset: AttachedStructure, device: int) -> StructureTiers:
    """The attached dataset's CSC on GPU `device`: the daemon's device structure tier mapped from
    its IPC handles (one copy per GPU, shared by every producer there), the rest read in place
    from the dataset's registered host mapping. Nothing is copied per producer."""
    graph = dataset.cuda_structure(device)
    return tiered_structure(graph, dataset.cuda_tiers(device).device_structure)


def host_copy_sampler(
    dataset: AttachedStructure, fanouts: Sequence[int], device: int, *, sm_share: float | None = None
) -> HostCopySampler:
    """The GPU sampler of an attached dataset on GPU `device` (see `dataset_structure`), its samples
    copied to host memory for a producer that gathers on the CPU; `sm_share` caps its grid."""
    load_cuda_ops()  # before mapping anything: CudaError saying why the GPU sampler cannot run here
    return HostCopySampler(CudaNeighborSampler(dataset_structure(dataset, device), fanouts, sm_share=sm_share))


def device_sampler(
    dataset: AttachedStructure, fanouts: Sequence[int], device: int, *, sm_share: float | None = None
) -> CudaNeighborSampler:
    """The GPU sampler of an attached dataset on GPU `device` (see `dataset_structure`), its samples
    left on the GPU: for a producer that gathers there too (`DeviceBatchMaker`); `sm_share` caps its grid."""
    load_cuda_ops()  # before mapping anything: CudaError saying why the GPU sampler cannot run here
    return CudaNeighborSampler(dataset_structure(dataset, device), fanouts, sm_share=sm_share)
