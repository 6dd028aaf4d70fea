"""Layer-wise inference: every layer of a GNN computed for its destination nodes over their whole
in-neighbourhoods, one layer after the other, as PyG's and DGL's layer-wise inference do.

Mini-batch inference of an L-layer model expands every seed L hops (fanout^L rows per seed, and
the same neighbours again for each seed that shares them); layer-wise inference computes layer l
for every node once, from layer l - 1's rows of its neighbours, so the whole model costs about
L x (nodes + edges). Per layer:

- the layer's destinations (every node, or only those the targets' receptive field reaches:
  `LayerwisePlan`) are split into one contiguous shard per rank, and each shard into chunks;
- a chunk's block is the sampler's one-hop sample with every neighbour taken (fanout -1): the
  chunk's nodes are its destinations and first sources (`Block`, DGL's message-flow graph);
- its input rows are layer 0's node features read through the dataset's tiers (`AttachedDataset.
  gather`: counted by tier as the producers' gathers are), or layer l - 1's rows of its sources;
- what the layer computes for the destinations is written into layer l's rows.

A layer's rows live in one file per layer in the job's directory (`LayerRows`), mapped shared by
every rank of the machine: a rank reads its neighbours' rows where another rank wrote them, no
rows travel through the process group. Once every rank has written (and flushed) its shard, a
marker records the layer complete, and the layer below is dropped unless its rows are wanted after
the run; a rank restarted by torchrun reads the markers and resumes after the last complete layer
(`key` tells a marker of this run from one of another model).

`layerwise()` yields the chunks; the built-in inference (`inference.py`) and a user's script
(`Job.layerwise`) both iterate it and `write` each chunk's output rows.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.contract.inference import DEFAULT_CHUNK
from graphtier.contract.traffic import TrafficCounts
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.sampling import Block, NeighborSampler
from graphtier.service.sampling.hetero_sampler import HeteroNeighborSampler
from graphtier.service.store import AttachedDataset

ROWS_DTYPE = torch.float32  # every layer's rows
_ROWS_SUFFIX = ".rows"
_MARK_SUFFIX = ".done.json"


def in_neighbours(graph: CSCGraph, ids: Tensor) -> Tensor:
    """int64: the in-neighbours of `ids` (with repeats), read straight from the CSC."""
    start = graph.colptr[ids]
    count = graph.colptr[ids + 1] - start
    total = int(count.sum())
    if total == 0:
        return torch.empty(0, dtype=torch.int64)
    first = torch.cumsum(count, 0) - count
    offsets = torch.arange(total) - torch.repeat_interleave(first - start, count, output_size=total)
    return graph.row[offsets]


class LayerwisePlan:
    """Which nodes each layer computes: `targets` at the last layer (None: every node), and at layer
    l - 1 the destinations of layer l with their in-neighbours -- or every node, with `last_only`
    (the layers below are wanted whole, e.g. for every node's embeddings); None stands for every node."""

    def __init__(
        self, graph: CSCGraph, num_layers: int, targets: Tensor | None = None, *, last_only: bool = False
    ) -> None:
        if num_layers < 1:
            raise GraphtierError(f"layer-wise inference needs at least one layer, got {num_layers}")
        self.num_nodes, self.num_layers = graph.num_nodes, num_layers
        wanted: list[Tensor | None] = [None] * num_layers
        if targets is not None:
            current = torch.unique(targets.to(torch.int64))
            if current.numel() and (int(current[0]) < 0 or int(current[-1]) >= graph.num_nodes):
                raise GraphtierError(f"target ids must lie in [0, {graph.num_nodes})")
            for layer in range(num_layers - 1, -1, -1):
                wanted[layer] = current
                if last_only:
                    break
                if layer:
                    current = torch.unique(torch.cat([current, in_neighbours(graph, current)]))
        self._wanted = wanted

    def destinations(self, layer: int) -> Tensor | None:
        """Sorted graphtier ids layer `layer` computes; None: every node."""
        return self._wanted[layer]

    def count(self, layer: int) -> int:
        wanted = self._wanted[layer]
        return self.num_nodes if wanted is None else int(wanted.numel())

    def shard(self, layer: int, rank: int, world_size: int) -> Tensor:
        """This rank's contiguous share of layer `layer`'s destinations."""
        n = self.count(layer)
        lo, hi = rank * n // world_size, (rank + 1) * n // world_size
        wanted = self._wanted[layer]
        return torch.arange(lo, hi, dtype=torch.int64) if wanted is None else wanted[lo:hi]

    def chunks(self, layer: int, rank: int, world_size: int, chunk_size: int) -> list[Tensor]:
        return list(self.shard(layer, rank, world_size).split(chunk_size))


class LayerRows:
    """Every layer's rows in files of the job's directory, mapped shared by the machine's ranks (module
    docstring); one object per rank, every rank calling the same methods in the same order."""

    def __init__(self, directory: Path, num_nodes: int, ctx: DistContext, key: str) -> None:
        self.directory, self.num_nodes, self.ctx, self.key = Path(directory), num_nodes, ctx, key
        self._maps: dict[int, np.memmap] = {}

    def _path(self, layer: int, suffix: str) -> Path:
        return self.directory / f"layer-{layer}{suffix}"

    def done(self, layer: int, width: int) -> bool:
        """Whether layer `layer` was completed, `width` wide, by a run with this key."""
        try:
            mark = json.loads(self._path(layer, _MARK_SUFFIX).read_text())
        except (OSError, ValueError):
            return False
        rows = self._path(layer, _ROWS_SUFFIX)
        expected = self.num_nodes * width * ROWS_DTYPE.itemsize
        return (
            mark.get("key") == self.key
            and mark.get("width") == width
            and rows.is_file()
            and rows.stat().st_size == expected
        )

    def first_incomplete(self, widths: Sequence[int]) -> int:
        """Where a run starts: after the last layer complete with this run's key (its rows are all the next
        layer reads; the layers below may have been dropped), 0 without one; len(widths): every layer is done."""
        return next((layer + 1 for layer in reversed(range(len(widths))) if self.done(layer, widths[layer])), 0)

    def drop(self, layer: int) -> None:
        """Layer `layer`'s rows are no longer read (every rank at once): unmapped, its file and marker removed."""
        self._maps.pop(layer, None)
        self.ctx.barrier()
        if self.ctx.rank == 0:
            self._path(layer, _MARK_SUFFIX).unlink(missing_ok=True)
            self._path(layer, _ROWS_SUFFIX).unlink(missing_ok=True)

    def rows(self, layer: int, width: int, *, create: bool = False) -> Tensor:
        """[num_nodes, width] float32 rows of layer `layer`, mapped shared; `create` (every rank at once)
        makes a new zero file first (sparse on disk until written) and forgets an old marker."""
        if create:
            if self.ctx.rank == 0:
                self.directory.mkdir(parents=True, exist_ok=True)
                self._path(layer, _MARK_SUFFIX).unlink(missing_ok=True)
                path = self._path(layer, _ROWS_SUFFIX)
                with open(path, "wb") as f:
                    f.truncate(self.num_nodes * width * ROWS_DTYPE.itemsize)
            self.ctx.barrier()
        array = self._maps.get(layer)
        if array is None or array.shape != (self.num_nodes, width):
            array = np.memmap(
                self._path(layer, _ROWS_SUFFIX), dtype=np.float32, mode="r+", shape=(self.num_nodes, width)
            )
            self._maps[layer] = array
        return torch.from_numpy(array)

    def complete(self, layer: int, width: int, computed: int) -> None:
        """This rank's shard of layer `layer` is written: flush it, wait for every rank, then mark the
        layer complete (rank 0, atomically)."""
        array = self._maps.get(layer)
        if array is not None:
            array.flush()
        self.ctx.barrier()
        if self.ctx.rank == 0:
            mark = self._path(layer, _MARK_SUFFIX)
            partial = mark.with_suffix(".partial")
            partial.write_text(json.dumps({"layer": layer, "width": width, "key": self.key, "rows": computed}))
            os.replace(partial, mark)
        self.ctx.barrier()

    def remove(self) -> None:
        """Drop the mappings and (rank 0, once every rank has dropped them) the files."""
        self._maps.clear()
        self.ctx.barrier()
        if self.ctx.rank == 0 and self.directory.is_dir():
            for path in self.directory.iterdir():
                if path.name.startswith("layer-"):
                    path.unlink(missing_ok=True)
            try:
                self.directory.rmdir()
            except OSError:
                pass


@dataclass
class LayerChunk:
    """One chunk of one layer: `block` over `nodes` (graphtier ids of its sources, the destinations
    first) and `x`, the layer's input rows of those sources -- layer 0's features through the tiers
    (on a heterogeneous graph a dict of each featured type's rows, in their order among `nodes`), else the
    previous layer's rows. Call `write(rows)` with the destinations' [num_dst, width] output."""

    layer: int
    index: int  # the chunk's position in this rank's share of the layer
    nodes: Tensor
    block: Block
    x: Tensor | dict[str, Tensor]
    edge_types: Tensor | None = None  # heterogeneous: the relation of each block edge
    node_types: Tensor | None = None  # heterogeneous: the type index of each source
    _sink: Callable[[Tensor], None] | None = field(default=None, repr=False)
    written: bool = False

    @property
    def destinations(self) -> Tensor:
        """Graphtier ids of the chunk's destinations (the block's first `num_dst` sources)."""
        return self.nodes[: self.block.num_dst]

    def write(self, rows: Tensor) -> None:
        """The layer's output rows of the chunk's destinations, [num_dst, width] (any device)."""
        if self.written:
            raise GraphtierError(f"layer {self.layer} chunk {self.index} was written already")
        assert self._sink is not None
        self._sink(rows)
        self.written = True


@dataclass
class LayerwiseProgress:
    """Where a layer-wise run stands on this rank, and what it read through the tiers."""

    layer: int = 0
    chunks_done: int = 0  # in the current layer
    chunks_in_layer: int = 0
    steps_done: int = 0  # chunks of every layer, the layers resumed past included
    total_steps: int = 0
    traffic: TrafficCounts = field(default_factory=TrafficCounts)
    gathered_chunks: int = 0
    sampled_nodes: int = 0
    sampled_edges: int = 0
    sample_s: float = 0.0
    gather_s: float = 0.0
    compute_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)


class _Neighbourhoods:
    """The one-hop sample of a chunk with every neighbour taken, heterogeneous or not."""

    def __init__(self, data: AttachedDataset) -> None:
        schema = data.handle.hetero
        self.is_hetero = schema is not None
        if schema is not None:
            assert data.edge_type is not None  # a heterogeneous handle carries it
            self.sampler: NeighborSampler | HeteroNeighborSampler = HeteroNeighborSampler(
                data.graph, data.edge_type, schema, [-1]
            )
        else:
            self.sampler = NeighborSampler(data.graph, [-1])

    def __call__(self, destinations: Tensor) -> tuple[Tensor, Block, Tensor | None, Tensor | None]:
        sub = self.sampler.sample(destinations, seed=0)  # every neighbour: no draw, any seed
        block = sub.block(0)
        if not self.is_hetero:
            return sub.node_ids, block, None, None
        assert sub.edge_types is not None and sub.node_types is not None
        return sub.node_ids, block, sub.edge_types[: block.num_edges], sub.node_types[: block.num_src]


def _features(data: AttachedDataset, nodes: Tensor, node_types: Tensor | None) -> tuple[Tensor | dict, TrafficCounts]:
    """Layer 0's input rows of `nodes` through the tiers: the features, or each featured type's rows."""
    schema = data.handle.hetero
    if schema is None:
        tiers = data.feature_tiers()
        x = torch.empty((nodes.numel(), *tiers.row_shape), dtype=tiers.dtype)
        return x, data.gather(nodes, x)
    assert node_types is not None
    rows: dict[str, Tensor] = {}
    traffic = TrafficCounts(simulated=True)
    for index, info in enumerate(schema.node_types):
        if info.name not in data.handle.hetero_features:
            continue
        local = nodes[node_types == index] - info.offset
        tiers = data.hetero_tiers(info.name)
        out = torch.empty((local.numel(), *tiers.row_shape), dtype=tiers.dtype)
        traffic = traffic + data.gather_hetero(info.name, local, out)
        rows[info.name] = out
    return rows, traffic


def layerwise(
    data: AttachedDataset,
    widths: Sequence[int],
    ctx: DistContext,
    rows: LayerRows,
    plan: LayerwisePlan,
    *,
    chunk_size: int = DEFAULT_CHUNK,
    device: torch.device | None = None,
    input_rows: Callable[[Tensor], Tensor] | None = None,
    on_chunk: Callable[[LayerwiseProgress], None] | None = None,
    keep: Collection[int] | None = None,
) -> Iterator[LayerChunk]:
    """This rank's chunks of every layer not yet complete (module docstring); `widths[l]` is layer l's
    output width. Every chunk must be `write`n before the next is asked for. `input_rows(nodes)`
    replaces layer 0's features (a model's learned embeddings); `device` (default: the context's)
    is where chunks' blocks and rows are put; `on_chunk(progress)` is called after each chunk.
    `keep`: the layers whose rows are wanted after the run (None: all); a layer not in it is dropped
    as soon as the next one is complete, so at most two layers' rows are held besides those."""
    if len(widths) != plan.num_layers:
        raise GraphtierError(f"{len(widths)} layer widths for a plan of {plan.num_layers} layers")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise GraphtierError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
    device = device or ctx.device
    neighbourhoods = _Neighbourhoods(data)
    counts = [len(plan.chunks(layer, ctx.rank, ctx.world_size, chunk_size)) for layer in range(plan.num_layers)]
    progress = LayerwiseProgress(total_steps=sum(counts))
    first = rows.first_incomplete(widths)
    progress.steps_done = sum(counts[:first])
    progress.layer = first
    for layer in range(first, plan.num_layers):
        previous = rows.rows(layer - 1, widths[layer - 1]) if layer else None
        out = rows.rows(layer, widths[layer], create=True)
        chunks = plan.chunks(layer, ctx.rank, ctx.world_size, chunk_size)
        progress.layer, progress.chunks_done, progress.chunks_in_layer = layer, 0, len(chunks)
        for index, destinations in enumerate(chunks):
            t0 = time.perf_counter()
            nodes, block, edge_types, node_types = neighbourhoods(destinations)
            t1 = time.perf_counter()
            progress.sample_s += t1 - t0
            progress.sampled_nodes += nodes.numel()
            progress.sampled_edges += block.num_edges
            if previous is not None:
                x: Tensor | dict[str, Tensor] = previous.index_select(0, nodes)
            elif input_rows is not None:
                x = input_rows(nodes)
            else:
                x, traffic = _features(data, nodes, node_types)
                progress.traffic = progress.traffic + traffic
                progress.gathered_chunks += 1
                progress.gather_s += time.perf_counter() - t1
            t2 = time.perf_counter()

            def sink(
                result: Tensor, destinations: Tensor = destinations, layer: int = layer, out: Tensor = out
            ) -> None:
                if result.shape != (destinations.numel(), widths[layer]):
                    raise GraphtierError(
                        f"layer {layer}: expected rows [{destinations.numel()}, {widths[layer]}] for the chunk's "
                        f"destinations, got {tuple(result.shape)}"
                    )
                rows_here = result.detach().to("cpu", ROWS_DTYPE)
                if plan.destinations(layer) is None:  # a contiguous range of ids
                    start = int(destinations[0])
                    out[start : start + destinations.numel()] = rows_here
                else:
                    out.index_copy_(0, destinations, rows_here)

            chunk = LayerChunk(
                layer=layer,
                index=index,
                nodes=nodes.to(device),
                block=_block_to(block, device),
                x={k: v.to(device) for k, v in x.items()} if isinstance(x, dict) else x.to(device),
                edge_types=edge_types.to(device) if edge_types is not None else None,
                node_types=node_types.to(device) if node_types is not None else None,
                _sink=sink,
            )
            yield chunk
            if not chunk.written:
                raise GraphtierError(f"layer {layer} chunk {index} was not written: call chunk.write(rows)")
            progress.compute_s += time.perf_counter() - t2
            progress.chunks_done, progress.steps_done = index + 1, progress.steps_done + 1
            if on_chunk is not None:
                on_chunk(progress)
        rows.complete(layer, widths[layer], plan.count(layer))
        if layer and keep is not None and layer - 1 not in keep:
            rows.drop(layer - 1)


def _block_to(block: Block, device: torch.device) -> Block:
    if block.indptr.device == device:
        return block
    return Block(block.indptr.to(device), block.indices.to(device), block.num_src, block.num_dst)
