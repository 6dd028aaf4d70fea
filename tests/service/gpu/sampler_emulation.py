"""The GPU sampler's kernels (native/cuda/neighbor_sampler.cu) re-stated on the CPU, thread by
thread, plus the graphs the sampler tests share (a plain module so tests can import it).

Each `EmulatedKernels` method is one kernel: a grid of `blocks x threads` threads, each running
the kernel's grid-stride loop body line for line on Python ints (uint64 arithmetic by masking),
reading the CSC from the tier the kernel would read it from. The threads run one after another
in a shuffled order, so a result that depended on thread order (a race in the relabel's marks)
would show. Plugged into `service.gpu.sampler.sample_hops`, it runs the GPU sampler's own
orchestration (allocations, cumsums, hop bookkeeping) on the CPU.
"""

from __future__ import annotations

import random

import torch

from graphtier.service.gpu.sampler import StructureTiers, check_seeds, sample_hops, seed_word
from graphtier.service.graph.csc import CSCGraph, build_csc
from graphtier.service.sampling import SampledSubgraph
from graphtier.service.sampling.counter_rng import GOLDEN, NODE_STRIDE, splitmix64_int

MASK64 = (1 << 64) - 1
FIRST_SEEN_BASE = -(1 << 63)  # kFirstSeenBase = INT64_MIN
POISON = 1 << 50  # written into host entries a correct kernel never reads (the device tier has them)


# graphtier/counter_rng.h, on Python ints
def node_key(seed: int, local: int) -> int:
    return splitmix64_int((splitmix64_int(seed & MASK64) + local * NODE_STRIDE) & MASK64)


def draw(key: int, j: int) -> int:
    return splitmix64_int((key + j * GOLDEN) & MASK64)


def uniform_below(h: int, m: int) -> int:
    return (h >> 11) % m


class EmulatedKernels:
    """`SamplerKernels` on CPU tensors, each kernel run as its threads would run it."""

    def __init__(self, structure: StructureTiers, *, max_blocks: int = 3, threads: int = 32, order_seed: int = 0):
        s = structure
        self.device_colptr, self.device_row = s.device_colptr.tolist(), s.device_row.tolist()
        self.host_colptr, self.host_row = s.host_colptr.tolist(), s.host_row.tolist()
        self.device_end = s.device_end
        self.max_blocks, self.threads = max_blocks, threads
        self.order = random.Random(order_seed)
        self.reads = {"device": 0, "host": 0}  # lists read from each tier (frontier nodes x kernels)

    # -- the launch: blocks_for() and the grid-stride loop of each thread, threads shuffled
    def _grid(self, n: int):
        blocks = min((n + self.threads - 1) // self.threads, self.max_blocks)
        stride = blocks * self.threads
        tids = list(range(stride))
        self.order.shuffle(tids)
        for tid in tids:  # first_index() = blockIdx.x * blockDim.x + threadIdx.x
            yield from range(tid, n, stride)

    def _colptr_of(self, v: int) -> list[int]:
        self.reads["device" if v < self.device_end else "host"] += 1
        return self.device_colptr if v < self.device_end else self.host_colptr

    def _row_of(self, v: int) -> list[int]:
        return self.device_row if v < self.device_end else self.host_row

    def degrees(self, frontier, fanout, starts, degrees, counts) -> None:
        f, k = frontier.tolist(), fanout
        n = len(f)
        st, dg, ct = [None] * n, [None] * n, [None] * n
        for i in self._grid(n):
            v = f[i]
            colptr = self._colptr_of(v)
            s = colptr[v]
            d = colptr[v + 1] - s
            st[i] = s
            dg[i] = d
            ct[i] = d if (k < 0 or d <= k) else k
        for out, values in ((starts, st), (degrees, dg), (counts, ct)):
            out.copy_(torch.tensor(values, dtype=torch.int64))

    def pick(self, frontier, fanout, seed, first_local, starts, degrees, ends, out) -> None:
        f, k, st, dg, en = frontier.tolist(), fanout, starts.tolist(), degrees.tolist(), ends.tolist()
        o = [None] * out.numel()
        useed = seed & MASK64  # static_cast<uint64_t>(seed)
        for i in self._grid(len(f)):
            v = f[i]
            row = self._row_of(v)
            s = st[i]
            d = dg[i]
            all_ = k < 0 or d <= k
            dst = en[i] - (d if all_ else k)  # int64_t* dst = out + ends[i] - (all ? d : k)
            if all_:
                for q in range(d):
                    o[dst + q] = row[s + q]
                continue
            key = node_key(useed, first_local + i)
            for q in range(k):
                j = d - k + q
                u = uniform_below(draw(key, q), j + 1)
                taken = False
                for p in range(q):
                    taken |= o[dst + p] == u
                o[dst + q] = j if taken else u
            for q in range(1, k):
                x = o[dst + q]
                p = q
                while p > 0 and o[dst + p - 1] > x:
                    o[dst + p] = o[dst + p - 1]
                    p -= 1
                o[dst + p] = x
            for q in range(k):
                o[dst + q] = row[s + o[dst + q]]
        assert None not in o, "an output slot no thread wrote"
        out.copy_(torch.tensor(o, dtype=torch.int64))

    def mark(self, nbrs, node_map) -> None:
        nb, nm = nbrs.tolist(), node_map.tolist()
        for e in self._grid(len(nb)):
            slot = nb[e]
            if nm[slot] < 0:
                nm[slot] = min(nm[slot], FIRST_SEEN_BASE + e)  # atomicMin
        node_map.copy_(torch.tensor(nm, dtype=torch.int64))

    def flag(self, nbrs, node_map, flags) -> None:
        nb, nm = nbrs.tolist(), node_map.tolist()
        fl = [None] * len(nb)
        for e in self._grid(len(nb)):
            fl[e] = 1 if nm[nb[e]] == FIRST_SEEN_BASE + e else 0
        flags.copy_(torch.tensor(fl, dtype=torch.int64))

    def assign(self, nbrs, flags, ranks, next_local, node_map, new_nodes) -> None:
        nb, fl, rk, nm = nbrs.tolist(), flags.tolist(), ranks.tolist(), node_map.tolist()
        nn = [None] * new_nodes.numel()
        for e in self._grid(len(nb)):
            if fl[e]:
                r = rk[e] - 1
                g = nb[e]
                nm[g] = next_local + r
                nn[r] = g
        assert None not in nn, "a new node no thread wrote"
        node_map.copy_(torch.tensor(nm, dtype=torch.int64))
        new_nodes.copy_(torch.tensor(nn, dtype=torch.int64))

    def apply(self, nbrs, node_map, local) -> None:
        nb, nm = nbrs.tolist(), node_map.tolist()
        lo = [None] * len(nb)
        for e in self._grid(len(nb)):
            lo[e] = nm[nb[e]]
        local.copy_(torch.tensor(lo, dtype=torch.int64))


def skewed_graph(num_nodes: int, num_edges: int, seed: int, *, isolated: int = 0) -> CSCGraph:
    """Random graph numbered hottest first (in-degree falls with the id, as after the daemon's
    relabel), with hubs past every fanout tested and the last `isolated` nodes without edges."""
    g = torch.Generator().manual_seed(seed)
    live = num_nodes - isolated
    src = torch.randint(0, live, (num_edges,), generator=g)
    dst = (torch.rand(num_edges, generator=g) ** 3 * live).long()
    return build_csc(num_nodes, src, dst)


def tiered(graph: CSCGraph, device_end: int, *, poison: bool = True) -> StructureTiers:
    """The graph split at `device_end`: the prefix copied as the device tier, and a host copy whose
    entries the device tier covers are overwritten with POISON, so reading the wrong tier shows."""
    host_colptr, host_row = graph.colptr.clone(), graph.row.clone()
    edges = int(graph.colptr[device_end])
    if poison and device_end > 1:
        host_colptr[1:device_end] = POISON  # [0] and [device_end] bound lists on both sides
    if poison:
        host_row[:edges] = POISON
    return StructureTiers(
        device_colptr=graph.colptr[: device_end + 1].clone(),
        device_row=graph.row[:edges].clone(),
        host_colptr=host_colptr,
        host_row=host_row,
    )


class EmulatedSampler:
    """`CudaNeighborSampler.sample` with its kernels emulated: the same `sample_hops` over a node map."""

    def __init__(self, structure: StructureTiers, fanouts: list[int]) -> None:
        self.kernels, self.fanouts = EmulatedKernels(structure), fanouts
        self.node_map = torch.full((structure.num_nodes,), -1, dtype=torch.int64)
        self.structure = structure
        self.node_ids: list[torch.Tensor] = []  # what each sample left on the "device"

    def sample(self, seeds: torch.Tensor, *, seed: int) -> SampledSubgraph:
        seeds = check_seeds(seeds, self.structure.num_nodes, self.structure.device)
        sub = sample_hops(self.kernels, seeds, self.fanouts, seed_word(seed), self.node_map)
        self.node_ids.append(sub.node_ids)
        return sub
