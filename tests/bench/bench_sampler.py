"""Neighbour-sampling throughput: graphtier's `NeighborSampler` against PyG, in one process.

On the symmetrised R-MAT graph (see rmat_fixture.py), with the same seed batches (drawn
from nodes with in-degree > 0), fanout 15,10,5, batch 1024, 2 torch threads, sampling
without replacement, 3 warm-up batches dropped, it times, batch by batch in turn:
  - graphtier NeighborSampler, native backend (and the torch backend for a few batches),
  - PyG NeighborLoader (replace=False, is_sorted=True; sampling + PyG's batch assembly),
  - the raw torch.ops.torch_sparse.neighbor_sample op PyG's loader calls here.
and prints a table with the ratio of graphtier to the PyG loader (target >= 15x).

PyG runs on torch-sparse's ops only (pyg-lib cannot be installed on this machine class);
tests/bench/baselines/setup_pyg.sh installs torch_geometric and builds those ops. Without
them the bench prints graphtier's numbers alone and says how to get the baseline.

Run: python tests/bench/bench_sampler.py [--scale 21] [--batches 30] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from machine import cpu_model, write_figures
from rmat_fixture import DEFAULT_CACHE_DIR, REPO_ROOT, RMatParams, load_or_build_rmat

from graphtier.contract.errors import GraphtierError
from graphtier.service.graph import CSCGraph

WARMUP = 3
TARGET_RATIO = 15.0
DEFAULT_TS_OPS = REPO_ROOT / ".bench-env" / "ts_ops"
SETUP_HINT = "run `bash tests/bench/baselines/setup_pyg.sh` (a few minutes) to install the PyG baseline"

# A step samples one seed batch (its index, its seeds) and returns (nodes, edges) sampled.
Step = Callable[[int, torch.Tensor], tuple[int, int]]


@dataclass
class Sampler:
    """One contender: its step and how many batches (warm-up included) it runs."""

    name: str
    step: Step
    max_batches: int


@dataclass
class Result:
    """Per-batch timings of one sampler, warm-up batches already dropped."""

    name: str
    times: list[float] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    edges: list[int] = field(default_factory=list)

    @property
    def batches_per_s(self) -> float:
        return len(self.times) / sum(self.times)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times) * 1e3

    @property
    def min_ms(self) -> float:
        return min(self.times) * 1e3

    @property
    def nodes_per_batch(self) -> float:
        return statistics.mean(self.nodes)

    @property
    def edges_per_batch(self) -> float:
        return statistics.mean(self.edges)


def time_interleaved(samplers: list[Sampler], batches: list[torch.Tensor]) -> list[Result]:
    """Time every sampler on every batch, batch by batch in turn; drop the first WARMUP batches.

    Interleaving (rather than one sampler after the other) makes load from other processes on
    a shared 2-core machine fall on every sampler alike, so the ratios stay meaningful.
    """
    results = [Result(s.name) for s in samplers]
    for i, seeds in enumerate(batches):
        for sampler, result in zip(samplers, results, strict=True):
            if i >= sampler.max_batches:
                continue
            t0 = time.perf_counter()
            nodes, edges = sampler.step(i, seeds)
            elapsed = time.perf_counter() - t0
            if i >= WARMUP:
                result.times.append(elapsed)
                result.nodes.append(nodes)
                result.edges.append(edges)
    return results


def seed_batches(graph: CSCGraph, num_batches: int, batch_size: int) -> list[torch.Tensor]:
    """`num_batches` disjoint seed batches from nodes with in-degree > 0 (fixed RNG seed)."""
    candidates = (graph.in_degree() > 0).nonzero().view(-1)
    need = num_batches * batch_size
    if candidates.numel() < need:
        raise SystemExit(
            f"only {candidates.numel():,} nodes have in-degree > 0, need {need:,} seeds: "
            "use fewer --batches, a smaller --batch-size or a larger --scale"
        )
    gen = torch.Generator().manual_seed(0)
    chosen = candidates[torch.randperm(candidates.numel(), generator=gen)[:need]]
    return list(chosen.split(batch_size))


def graphtier_step(graph: CSCGraph, fanouts: list[int], backend: str) -> Step | str:
    """graphtier's sampler on `backend`; a string saying why when it cannot run."""
    try:
        from graphtier.service.sampling import NeighborSampler

        sampler = NeighborSampler(graph, fanouts, backend=backend)
    except Exception as exc:  # reported in the output, the other rows still run
        return f"{type(exc).__name__}: {exc}"

    def step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        out = sampler.sample(seeds, seed=i)
        return out.node_ids.numel(), out.indices.numel()

    return step


def load_pyg(ts_ops_dir: Path) -> str | None:
    """Make PyG's torch-sparse path usable; None when ready, else why not."""
    try:
        import torch_geometric.typing as tgt
    except ImportError as exc:
        return f"torch_geometric is not installed ({exc})"
    if not (tgt.WITH_PYG_LIB or tgt.WITH_TORCH_SPARSE):
        libs = sorted(glob.glob(str(ts_ops_dir / "_*_cpu.so")))
        if not libs:
            return f"no torch-sparse ops in {ts_ops_dir}"
        try:
            for lib in libs:
                torch.ops.load_library(lib)
            _ = torch.ops.torch_sparse.neighbor_sample  # raises if the op did not register
        except (OSError, RuntimeError, AttributeError) as exc:
            return f"torch-sparse ops in {ts_ops_dir} do not load ({exc})"
        tgt.WITH_TORCH_SPARSE = True
    return None


def pyg_samplers(graph: CSCGraph, fanouts: list[int], batches: list[torch.Tensor]) -> list[Sampler]:
    """PyG's NeighborLoader over the same seed batches, and the raw torch-sparse op it calls."""
    import torch_geometric.typing as tgt
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    # PyG warns that torch-sparse sampling is deprecated: known, it is the only backend here.
    warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation.*")
    t0 = time.perf_counter()
    data = Data(edge_index=torch.stack([graph.row, graph.dst_of_edges()]), num_nodes=graph.num_nodes)
    loader = NeighborLoader(
        data,
        num_neighbors=fanouts,
        batch_size=batches[0].numel(),
        input_nodes=torch.cat(batches),
        replace=False,
        shuffle=False,
        is_sorted=True,
        num_workers=0,
    )
    print(f"PyG NeighborLoader construction (is_sorted=True): {time.perf_counter() - t0:.2f}s")
    it = iter(loader)

    def loader_step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
        batch = next(it)  # the loader walks the same seed batches in the same order
        return batch.num_nodes, batch.edge_index.size(1)

    samplers = [Sampler("PyG NeighborLoader", loader_step, len(batches))]
    if tgt.WITH_TORCH_SPARSE and not tgt.WITH_PYG_LIB:

        def raw_step(i: int, seeds: torch.Tensor) -> tuple[int, int]:
            node, row, _, _ = torch.ops.torch_sparse.neighbor_sample(
                graph.colptr, graph.row, seeds, fanouts, False, True
            )
            return node.numel(), row.numel()

        samplers.append(Sampler("torch_sparse.neighbor_sample op", raw_step, len(batches)))
    return samplers


def machine_info(threads: int) -> str:
    """One line naming CPU, cores, versions and current load, so a table can be interpreted later."""
    model = cpu_model()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        import torch_geometric

        pyg = f"torch_geometric {torch_geometric.__version__}"
    except ImportError:
        pyg = "torch_geometric not installed"
    load = f", load average {os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else ""
    return (
        f"machine: {model}, {os.cpu_count()} logical cores ({usable} usable), "
        f"python {platform.python_version()}, torch {torch.__version__} ({threads} threads), {pyg}{load}"
    )


def print_table(results: list[Result], reference: Result | None) -> None:
    """The results, one row per sampler, with throughput relative to PyG's loader when it ran."""
    head = (
        f"{'sampler':46s} {'batches/s':>10s} {'median ms':>10s} {'min ms':>8s} "
        f"{'nodes/batch':>12s} {'edges/batch':>12s} {'vs PyG loader':>14s}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        ratio = f"{r.batches_per_s / reference.batches_per_s:13.1f}x" if reference else f"{'-':>14s}"
        print(
            f"{r.name:46s} {r.batches_per_s:10.2f} {r.median_ms:10.1f} {r.min_ms:8.1f} "
            f"{r.nodes_per_batch:12,.0f} {r.edges_per_batch:12,.0f} {ratio}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=21, help="R-MAT scale: 2^scale nodes (default 21)")
    p.add_argument("--batches", type=int, default=30, help="timed batches per sampler (default 30)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanout", default="15,10,5")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--torch-batches", type=int, default=5, help="timed batches for graphtier's torch backend (0 skips it)"
    )
    p.add_argument("--quick", action="store_true", help="scale 16 and 10 batches (smoke test)")
    p.add_argument("--json", help="also write the figures as JSON here")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="where the graph is cached")
    p.add_argument(
        "--ts-ops",
        type=Path,
        default=Path(os.environ.get("BASELINE_TS_OPS", DEFAULT_TS_OPS)),
        help="folder with torch-sparse's _*_cpu.so ops",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.scale, args.batches = 16, 10
    try:
        args.fanouts = [int(x) for x in args.fanout.split(",")]
    except ValueError:
        p.error(f"--fanout {args.fanout!r} must be comma-separated integers, e.g. 15,10,5")
    if args.batches < 1 or args.batch_size < 1 or args.threads < 1 or min(args.fanouts) < 1:
        p.error("--batches, --batch-size, --threads and every fanout must be >= 1")
    args.rmat = RMatParams(scale=args.scale)
    try:
        args.rmat.check()
    except GraphtierError as exc:
        p.error(f"--scale: {exc}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    graph = load_or_build_rmat(args.rmat, args.cache_dir)
    batches = seed_batches(graph, args.batches + WARMUP, args.batch_size)
    print(
        f"graph: R-MAT scale {args.scale}, N={graph.num_nodes:,}, E={graph.num_edges:,}; "
        f"fanout={args.fanouts} batch={args.batch_size} threads={args.threads} "
        f"timed batches={args.batches} ({WARMUP} warm-up dropped), replace=False"
    )

    samplers: list[Sampler] = []
    native = graphtier_step(graph, args.fanouts, "native")
    if isinstance(native, str):
        print(f"graphtier native backend unavailable ({native}); timing the torch backend on every batch")
    else:
        samplers.append(Sampler("graphtier NeighborSampler (native)", native, len(batches)))
    few = min(args.torch_batches, args.batches)
    if not samplers or few > 0:
        fallback = graphtier_step(graph, args.fanouts, "torch")
        if isinstance(fallback, str):
            print(f"graphtier torch backend unavailable: {fallback}")
        elif not samplers:
            samplers.append(Sampler("graphtier NeighborSampler (torch)", fallback, len(batches)))
        else:
            samplers.append(Sampler(f"graphtier NeighborSampler (torch) [{few} batches]", fallback, few + WARMUP))
    graphtier_ran = bool(samplers)

    why_not = load_pyg(args.ts_ops)
    if why_not is None:
        samplers += pyg_samplers(graph, args.fanouts, batches)
    else:
        print(f"PyG baseline unavailable: {why_not}; {SETUP_HINT}")
    results = [r for r in time_interleaved(samplers, batches) if r.times]
    headline = results[0] if graphtier_ran and results else None
    reference = next((r for r in results if r.name == "PyG NeighborLoader"), None)

    if not results:
        print("no sampler could run", file=sys.stderr)
        return 1
    print_table(results, reference)
    if hasattr(os, "getloadavg"):  # other processes on a 2-core machine skew every row
        print(f"load average at the end (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if headline is None:
        print("graphtier's sampler did not run", file=sys.stderr)
        return 1
    load = round(os.getloadavg()[0], 2)
    figures: list[dict[str, object]] = [
        {
            "name": f"{headline.name} median batch",
            "value": round(headline.median_ms, 2),
            "unit": "ms",
            "load_average": load,
        }
    ]
    if reference is not None:
        ratio = headline.batches_per_s / reference.batches_per_s
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        print(
            f"{headline.name} / PyG NeighborLoader: {ratio:.1f}x batches/s (target >= {TARGET_RATIO:.0f}x: "
            f"{verdict}); median-batch {reference.median_ms / headline.median_ms:.1f}x, "
            f"best-batch {reference.min_ms / headline.min_ms:.1f}x"
        )
        figures.append(
            {
                "name": f"sampler, R-MAT scale {args.scale}, batches/s",
                "value": round(ratio, 1),
                "unit": "x",
                "baseline": "PyG NeighborLoader",
                "target": TARGET_RATIO,
                "load_average": load,
            }
        )
    write_figures(
        args.json,
        "sampler",
        figures,
        command=f"python tests/bench/bench_sampler.py --scale {args.scale} --batches {args.batches}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
