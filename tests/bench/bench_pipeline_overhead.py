"""Pipeline overhead: is data loading hidden behind a 0.2 s training step?

One rank: the dataset in shm tiers (SharedDatasetStore, as the daemon holds it), one
producer process (sample 15,10,5 around 1024 seeds -> tiered gather into a ping-pong slot),
and this process as the trainer, whose model is a fixed 0.2 s sleep per step. The figure is
end-to-end step time / stand-in time (issue target: <= 1.1). Also printed: how long the
consumer waited per step, the producer's sample and gather time per batch (its headroom),
and the probed slot capacity against the k-hop worst case.

The dataset is R-MAT scale 20 with 128 float32 features, prepared once with
`graphtier dataset prepare synthetic:rmat --name rmat20 --scale 20 --undirected --out ROOT`
(done by this script when ROOT has no such dataset; about a minute).

Run: python tests/bench/bench_pipeline_overhead.py [--root DIR] [--steps 40] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from machine import bench_cache, cpu_model, write_figures

from graphtier.service.native_ops import native_available
from graphtier.service.pipeline import ChannelReader, ProducerConfig, spawn_producer
from graphtier.service.pipeline import capacity as caps
from graphtier.service.placement import PlacementPlan, TierBudgets
from graphtier.service.prepared import PreparedDataset
from graphtier.service.store import SharedDatasetStore

REPO_ROOT = Path(__file__).resolve().parents[2]


def ensure_dataset(root: Path, name: str, scale: int) -> PreparedDataset:
    if not (root / name / "manifest.json").exists():
        command = [
            "graphtier",
            "dataset",
            "prepare",
            "synthetic:rmat",
            "--name",
            name,
            "--scale",
            str(scale),
            "--undirected",
            "--out",
            str(root),
        ]
        print("preparing:", " ".join(command), flush=True)
        subprocess.run(command, check=True)
    return PreparedDataset.open(name, root)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("prepared"), help="prepared dataset root")
    p.add_argument("--scale", type=int, default=20)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--stand-in", type=float, default=0.2, help="seconds the fake model takes per step")
    p.add_argument("--steps", type=int, default=40, help="measured steps")
    p.add_argument("--warmup", type=int, default=3, help="steps before measuring (fill the pipeline)")
    p.add_argument("--slots", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="scale 14, 8 steps of 0.05 s: a CI smoke run")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args()
    if a.quick:
        a.scale, a.steps, a.warmup, a.stand_in = 14, 8, 2, 0.05
    fanouts = [int(k) for k in a.fanouts.split(",")]
    dataset = ensure_dataset(a.root, f"rmat{a.scale}", a.scale)
    m = dataset.manifest
    n, row_bytes = m.num_nodes, m.feature_row_bytes
    budgets = TierBudgets(
        device_replicated_bytes=n * row_bytes // 10,
        device_interleaved_bytes=n * row_bytes // 5,
        num_devices=2,
        host_bytes=None,
        structure_device_bytes=0,
    )
    plan = PlacementPlan.from_budgets(budgets, num_nodes=n, row_bytes=row_bytes)

    t0 = time.perf_counter()
    store = SharedDatasetStore(dataset, plan)
    load_s = time.perf_counter() - t0
    channel_dir = Path(tempfile.mkdtemp(prefix="gtbench-"))
    try:
        steps_needed = a.warmup + a.steps
        train = m.split_sizes["train"]
        epochs = -(-steps_needed // -(-train // a.batch_size))
        config = ProducerConfig(
            dataset=store.handle,
            rank=0,
            world_size=1,
            fanouts=fanouts,
            batch_size=a.batch_size,
            epochs=epochs,
            seed=0,
            num_slots=a.slots,
            channel_dir=channel_dir,
        )
        t0 = time.perf_counter()
        producer = spawn_producer(config)
        startup_s = time.perf_counter() - t0
        step_s, fetch_s, wait_s, sample_s, gather_s, nodes = [], [], [], [], [], []
        with producer, ChannelReader(producer.layout, timeout=60) as reader:
            for step in range(steps_needed):
                start = time.perf_counter()
                batch = reader.next_batch()
                fetched = time.perf_counter()
                if batch is None:
                    raise RuntimeError(f"the producer ended after {step} batches")
                time.sleep(a.stand_in)  # the model
                if step >= a.warmup:
                    step_s.append(time.perf_counter() - start)
                    fetch_s.append(fetched - start)
                    wait_s.append(batch.wait_s)
                    sample_s.append(batch.sample_s)
                    gather_s.append(batch.gather_s)
                    nodes.append(batch.node_ids.numel())
            stats = reader.stats()
        layout = producer.layout
    finally:
        store.close()
        shutil.rmtree(channel_dir, ignore_errors=True)

    alone_s = []
    for _ in range(min(a.steps, 10)):  # the stand-in with no data at all: the timer's own overshoot
        start = time.perf_counter()
        time.sleep(a.stand_in)
        alone_s.append(time.perf_counter() - start)
    mean_step = statistics.mean(step_s)
    worst = caps.upper_bound(batch_size=a.batch_size, fanouts=fanouts, num_nodes=n, num_edges=m.num_edges)
    cap = layout.slots[0].capacity
    slot_mib = (cap.nodes * (8 + row_bytes) + cap.edges * 8 + cap.expanded * 8) / 2**20
    print(
        f"machine: {cpu_model()} ({os.cpu_count()} logical cpus), {platform.system()} {platform.release()}; "
        f"python {platform.python_version()}, torch {torch.__version__}; native ops {native_available()}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"dataset: R-MAT scale {a.scale}, N={n:,}, E={m.num_edges:,}, {m.feature_dim} float32 features; "
        f"train ids {train:,}; loaded into shm in {load_s:.1f} s"
    )
    print(
        f"pipeline: fanout {a.fanouts}, batch {a.batch_size}, {a.slots} slots, 1 rank, stand-in model "
        f"{a.stand_in:g} s/step; producer start-up {startup_s:.1f} s (incl. probing {config.probe_batches} batches)"
    )
    print(
        f"slot capacity: {cap.nodes:,} nodes / {cap.edges:,} edges ({slot_mib:.0f} MiB per slot); "
        f"k-hop worst case {worst.nodes:,} nodes / {worst.edges:,} edges; slot growths {stats.slot_growths}"
    )
    print()
    title = f"measure (per step, {len(step_s)} steps)"
    print(f"{title:38s} {'mean':>9s} {'p50':>9s} {'p95':>9s} {'max':>9s}")
    for label, values in (
        ("end-to-end step time s", step_s),
        ("stand-in alone, no data s", alone_s),
        ("next_batch() call s", fetch_s),
        ("  of which waiting for data s", wait_s),
        ("producer sample s", sample_s),
        ("producer gather (fill slot) s", gather_s),
        ("sampled nodes per batch", nodes),
    ):
        fmt = "{:9,.0f}" if label.startswith("sampled") else "{:9.4f}"
        row = [statistics.mean(values), percentile(values, 0.5), percentile(values, 0.95), max(values)]
        print(f"{label:38s} " + " ".join(fmt.format(v) for v in row))
    print()
    busy = statistics.mean(sample_s) + statistics.mean(gather_s)
    ratio = mean_step / a.stand_in
    print(
        f"producer busy per batch {busy:.3f} s = {busy / a.stand_in:.2f} x the step; it waited for a free slot "
        f"{stats.producer_wait_s:.1f} s in all; traffic hit ratio {stats.traffic.hit_ratio:.3f} "
        f"(device tiers simulated={stats.traffic.simulated})"
    )
    print(
        f"step time / stand-in = {mean_step:.4f} / {a.stand_in:g} = {ratio:.3f}  (target <= 1.1: "
        f"{'met' if ratio <= 1.1 else 'NOT met'})"
    )
    write_figures(
        a.json,
        "pipeline overhead",
        [
            {
                "name": f"step time with a {a.stand_in:g} s stand-in model, R-MAT scale {a.scale} "
                f"(mean of {len(step_s)})",
                "value": round(ratio, 3),
                "unit": "x",
                "baseline": "the stand-in alone",
                "baseline_value": round(statistics.mean(alone_s) / a.stand_in, 3),
                "target": 1.1,
                "better": "lower",
                "load_average": round(os.getloadavg()[0], 2),
            }
        ],
        command=f"python tests/bench/bench_pipeline_overhead.py --steps {a.steps}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
