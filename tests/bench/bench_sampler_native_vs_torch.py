"""Neighbour-sampling throughput, native op vs pure-torch fallback, on an R-MAT graph.

Target (issue): scale 21 (2M nodes, ~48M edges symmetrised), fanout 15,10,5, batch 1024,
2 threads: >= 40 mini-batches/s native (DGL's C++ CPU sampler ~38/s, PyG NeighborLoader ~2.4/s).
Seeds are shuffled nodes with in-degree > 0, as in the reference DGL bench.

Run: python tests/bench/bench_sampler_native_vs_torch.py [--quick] [--scale 21] [--cache /tmp/rmat21.pt]
     [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
from machine import write_figures

from graphtier.service.graph.csc import CSCGraph
from graphtier.service.sampling import NeighborSampler


def rmat_csc(scale: int, edge_factor: int, seed: int = 0) -> CSCGraph:
    """R-MAT (a=.57, b=c=.19) graph, randomly relabelled, self loops dropped, symmetrised, deduplicated."""
    g = torch.Generator().manual_seed(seed)
    n, e = 1 << scale, edge_factor << scale
    ab, c_norm, a_norm = 0.76, 0.19 / 0.24, 0.57 / 0.76
    src = torch.zeros(e, dtype=torch.int64)
    dst = torch.zeros(e, dtype=torch.int64)
    for level in range(scale):
        r1, r2 = torch.rand(e, generator=g), torch.rand(e, generator=g)
        src_bit = r1 > ab
        dst_bit = torch.where(src_bit, r2 > c_norm, r2 > a_norm)
        src += src_bit.to(torch.int64) << level
        dst += dst_bit.to(torch.int64) << level
    perm = torch.randperm(n, generator=g)
    src, dst = perm[src], perm[dst]
    keep = src != dst
    src, dst = src[keep], dst[keep]
    key = torch.unique(torch.cat([dst * n + src, src * n + dst]), sorted=True)
    dst_sorted = key // n
    row = key - dst_sorted * n
    colptr = torch.zeros(n + 1, dtype=torch.int64)
    colptr[1:] = torch.cumsum(torch.bincount(dst_sorted, minlength=n), 0)
    return CSCGraph(colptr=colptr, row=row)


def load_graph(scale: int, cache: str | None) -> CSCGraph:
    if cache and os.path.exists(cache):
        d = torch.load(cache)
        return CSCGraph(colptr=d["colptr"], row=d["row"])
    graph = rmat_csc(scale, 12)
    if cache:
        torch.save({"colptr": graph.colptr, "row": graph.row}, cache)
    return graph


def run(sampler: NeighborSampler, batches: list[torch.Tensor], warmup: int) -> tuple[float, float, float, float]:
    times, nodes, edges = [], [], []
    for i, b in enumerate(batches):
        t = time.perf_counter()
        sub = sampler.sample(b, seed=i)
        dt = time.perf_counter() - t
        if i >= warmup:
            times.append(dt)
            nodes.append(sub.num_nodes)
            edges.append(sub.num_edges)
    return len(times) / sum(times), statistics.median(times), statistics.mean(nodes), statistics.mean(edges)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=int, default=21)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--torch-batches", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", default=None, help="torch.save file to reuse the generated graph")
    p.add_argument("--quick", action="store_true", help="scale 16, few batches (CI smoke run)")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args()
    if a.quick:
        a.scale, a.batches, a.torch_batches = 16, 10, 3
    torch.set_num_threads(a.threads)
    fanouts = [int(x) for x in a.fanout.split(",")]

    t = time.perf_counter()
    graph = load_graph(a.scale, a.cache)
    elapsed = time.perf_counter() - t
    print(f"R-MAT scale {a.scale}: {graph.num_nodes:,} nodes, {graph.num_edges:,} edges ({elapsed:.1f}s)")
    gen = torch.Generator().manual_seed(1)
    cand = (graph.in_degree() > 0).nonzero().squeeze(1)
    seeds = cand[torch.randperm(cand.numel(), generator=gen)[: (a.batches + 3) * a.batch_size]]
    batches = list(seeds.split(a.batch_size))

    with open("/proc/cpuinfo") as f:
        cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.processor())
    print(
        f"cpu: {cpu}; torch {torch.__version__}; threads {a.threads}; fanout {fanouts}; batch {a.batch_size}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'backend':8s} {'batches/s':>10s} {'median ms':>10s} {'nodes/batch':>12s} {'edges/batch':>12s}")
    medians: dict[str, float] = {}
    for backend, n in (("native", a.batches), ("torch", a.torch_batches)):
        try:
            sampler = NeighborSampler(graph, fanouts, backend=backend)
        except Exception as exc:  # native not built: report and go on with torch
            print(f"{backend:8s} unavailable: {exc}")
            continue
        rate, med, nodes, edges = run(sampler, batches[: n + 3], warmup=3)
        medians[backend] = med
        print(f"{backend:8s} {rate:10.1f} {med * 1e3:10.1f} {nodes:12,.0f} {edges:12,.0f}")
    if "native" in medians and "torch" in medians:
        load = round(os.getloadavg()[0], 2)
        write_figures(
            a.json,
            "native sampler vs its torch fallback",
            [
                {"name": "native sampler median batch", "value": round(medians["native"] * 1e3, 2), "unit": "ms"},
                {
                    "name": f"native sampler, R-MAT scale {a.scale}, batches/s (medians)",
                    "value": round(medians["torch"] / medians["native"], 1),
                    "unit": "x",
                    "baseline": "graphtier's pure-torch fallback",
                    "load_average": load,
                },
            ],
            command=f"python tests/bench/bench_sampler_native_vs_torch.py --scale {a.scale} --batches {a.batches}",
        )


if __name__ == "__main__":
    main()
