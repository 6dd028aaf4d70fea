"""DGL 2.1's block sampler as a worker process, for bench_sampler_contended.py.

DGL 2.1 needs numpy < 2 and its own torch install, so it runs in its own venv and is driven over
stdin/stdout: it loads the graph and the seed batches a bench saved (torch.save of colptr, row,
num_nodes, fanouts, threads, batches), prints `ready <seconds to build the DGLGraph>`, then for
every line `<batch index>` samples that batch with `dgl.dataloading.NeighborSampler.sample_blocks`
(what DGL's DataLoader runs) and prints `<seconds> <input nodes> <edges in all blocks>`; `quit`
or end of input ends it. It imports nothing from graphtier.

Run: <dgl venv>/bin/python dgl_sampler_worker.py <saved batches file>
"""

from __future__ import annotations

import sys
import time
import warnings

warnings.filterwarnings("ignore")  # DGL's missing-graphbolt and backend notices

import dgl  # noqa: E402  (after the filter, which must see DGL's import-time notices)
import torch  # noqa: E402  (after the filter, as dgl)


def main(path: str) -> int:
    saved = torch.load(path, weights_only=True)
    torch.set_num_threads(int(saved["threads"]))
    t0 = time.perf_counter()
    empty = torch.empty(0, dtype=torch.int64)
    graph = dgl.graph(("csc", (saved["colptr"], saved["row"], empty)), num_nodes=int(saved["num_nodes"]))
    graph = graph.formats(["csc"])
    graph.create_formats_()
    build_s = time.perf_counter() - t0
    # DGL lists fanouts input layer first; graphtier and PyG list them seed hop first.
    sampler = dgl.dataloading.NeighborSampler(list(reversed([int(k) for k in saved["fanouts"]])))
    batches = saved["batches"]
    print(f"ready {build_s:.3f} dgl {dgl.__version__} torch {torch.__version__}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        seeds = batches[int(command)]
        t0 = time.perf_counter()
        input_nodes, _, blocks = sampler.sample_blocks(graph, seeds)
        elapsed = time.perf_counter() - t0
        edges = sum(block.num_edges() for block in blocks)
        print(f"{elapsed:.9f} {input_nodes.numel()} {edges}", flush=True)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} <saved batches file>")
    sys.exit(main(sys.argv[1]))
