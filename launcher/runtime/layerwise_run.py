"""A training script's own layer-wise inference: `Job.layerwise(widths)` gives a `LayerwiseRun`.

The same iteration the built-in inference runs (`layerwise.py`), for the script's own model: every
rank iterates its chunks of every layer -- the destinations, their full-neighbourhood block and the
layer's input rows -- and writes the rows its layer computes:

    run = job.layerwise([hidden, num_classes])           # the width of each layer's rows
    for chunk in run:                                    # this rank's chunks, layer 0 first
        h = model.layers[chunk.layer](chunk.block, chunk.x)
        chunk.write(F.relu(h) if chunk.layer == 0 else h)
    run.save({"embeddings": 0, "logits": 1})             # npy shards in the source's ids, predictions/
    run.close()                                          # the layer rows' files go

`run.rows(layer)` is a layer's [num_nodes, width] rows in graphtier's ids (a file mapped shared
by the machine's ranks), for a script that does more with them. A rank restarted by torchrun that
asks for the same run (same `key`: by default the job's step count, the widths and the ids) resumes
at the first layer the earlier attempt had not completed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor

from graphtier.contract.errors import GraphtierError
from graphtier.contract.inference import DEFAULT_CHUNK, PredictionManifest
from graphtier.contract.jobs.directory import layer_rows_dir, predictions_dir
from graphtier.launcher.runtime.distributed import DistContext
from graphtier.launcher.runtime.inference_output import group_info, output_groups, write_manifest, write_shard
from graphtier.launcher.runtime.layerwise import LayerChunk, LayerRows, LayerwisePlan, LayerwiseProgress, layerwise
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.digests import dataset_version
from graphtier.service.store import AttachedDataset


class LayerwiseRun:
    """One layer-wise pass of a script's model over its job's graph (module docstring)."""

    def __init__(
        self,
        data: AttachedDataset,
        prepared: Callable[[], PreparedDataset],
        ctx: DistContext,
        job_id: str,
        job_dir: Path,
        widths: Sequence[int],
        *,
        ids_file: Path | None,
        chunk_size: int = DEFAULT_CHUNK,
        key: str,
        input_rows: Callable[[Tensor], Tensor] | None = None,
        on_chunk: Callable[[LayerwiseProgress], None] | None = None,
    ) -> None:
        if not widths or any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
            raise GraphtierError(f"job.layerwise(widths): give each layer's output width, ints >= 1; got {widths!r}")
        self.data, self.ctx, self.job_id, self.job_dir = data, ctx, job_id, Path(job_dir)
        self.widths, self.ids_file = list(widths), ids_file
        self._prepared = prepared
        self._groups = output_groups(prepared(), data.handle.hetero, ids_file)
        targets = torch.cat([g.nodes for g in self._groups]) if ids_file is not None else None
        self.plan = LayerwisePlan(data.graph, len(self.widths), targets)
        self._rows = LayerRows(layer_rows_dir(self.job_dir), data.graph.num_nodes, ctx, key=key)
        self._chunk_size, self._input_rows, self._on_chunk = chunk_size, input_rows, on_chunk
        self._started = time.perf_counter()
        self._iterated = False

    def __iter__(self) -> Iterator[LayerChunk]:
        """This rank's chunks of every layer not yet complete, layer 0 first; `write` each one's rows."""
        if self._iterated:
            raise GraphtierError("a layer-wise run is iterated once; call job.layerwise() again for another")
        self._iterated = True
        yield from layerwise(
            self.data,
            self.widths,
            self.ctx,
            self._rows,
            self.plan,
            chunk_size=self._chunk_size,
            device=self.ctx.device,
            input_rows=self._input_rows,
            on_chunk=self._on_chunk,
        )

    def rows(self, layer: int) -> Tensor:
        """Layer `layer`'s [num_nodes, width] rows in graphtier's ids (`job.source_ids` maps them); rows
        the run did not compute (outside an id file's receptive field) are zero."""
        if not 0 <= layer < len(self.widths):
            raise GraphtierError(f"layer {layer} is not one of the run's {len(self.widths)} layers")
        return self._rows.rows(layer, self.widths[layer])

    def save(self, arrays: dict[str, int], directory: Path | None = None) -> Path:
        """Write layer `arrays[name]`'s rows as array `name`, npy shards in the source's ids (every rank its
        own; rank 0 the manifest) to `directory` (default: `predictions/` in the job's directory); every
        rank must call it. Returns the directory."""
        if not self._iterated:
            raise GraphtierError("iterate the run (and write every chunk) before saving its rows")
        out = Path(directory) if directory is not None else predictions_dir(self.job_dir)
        columns = {}
        for group in self._groups:

            def arrays_of(nodes: Tensor) -> dict[str, Tensor]:
                return {name: self.rows(layer).index_select(0, nodes) for name, layer in arrays.items()}

            columns[group.group] = write_shard(out, group, arrays_of, self.ctx.rank, self.ctx.world_size)
        self.ctx.barrier()
        if self.ctx.rank == 0:
            prepared = self._prepared()
            manifest = PredictionManifest(
                job_id=self.job_id,
                dataset=self.data.handle.dataset,
                dataset_version=dataset_version(prepared.directory) or "",
                trained=None,
                rows="every node" if self.ids_file is None else str(self.ids_file),
                groups={g.group: group_info(g, columns[g.group], self.ctx.world_size) for g in self._groups},
                seconds=time.perf_counter() - self._started,
            )
            write_manifest(out, manifest)
        self.ctx.barrier()
        return out

    def close(self) -> None:
        """Remove the layer rows' files (every rank must call it)."""
        self._rows.remove()
