"""Tiering benchmark: weighted reverse PageRank placement vs the oracle at a device budget.

Prepares each graph (undirected; a seeded random 10% train split where the source has none),
replays sampled epochs once per graph, and prints every score's device-tier hit ratio at the
budget and its ratio to the oracle (placement by the very access counts being scored, the
upper bound of any static placement). Target: wrpr >= 90% of the oracle at 10% on the SNAP
graphs and the synthetic graph. Device tiers are accounted (exact on any machine).

Run: python tests/bench/bench_tiering.py [--budget 10%] [--epochs 1] [--rmat-scale 18] [--quick]
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.tiering import build_tiering_report

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"

GRAPHS = {
    "ca-CondMat (SNAP)": ("edges:{}/snap_ca-CondMat/CA-CondMat.txt", {}),
    "email-Enron (SNAP)": ("edges:{}/snap_email-Enron/email-Enron.txt", {}),
    "soc-Slashdot0902 (SNAP)": ("edges:{}/snap_soc-Slashdot0902/soc-Slashdot0902.txt.gz", {}),
    "luxembourg road (contrast)": ("edges:{}/road_luxembourg_osm/luxembourg_osm.mtx", {}),
    "Cora (Planetoid split)": ("planetoid:{}/planetoid_cora", {}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="10%")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fanout", default="15,10,5")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--rmat-scale", type=int, default=18)
    parser.add_argument("--shared", type=Path, default=SHARED)
    parser.add_argument("--quick", action="store_true", help="only ca-CondMat and R-MAT scale 14")
    args = parser.parse_args()
    torch.set_num_threads(2)
    fanouts = [int(x) for x in args.fanout.split(",")]

    graphs = dict(GRAPHS)
    graphs[f"R-MAT scale {args.rmat_scale} (synthetic)"] = ("synthetic:rmat", {"scale": args.rmat_scale})
    if args.quick:
        graphs = {k: v for k, v in graphs.items() if "CondMat" in k}
        graphs["R-MAT scale 14 (synthetic)"] = ("synthetic:rmat", {"scale": 14})

    rows = []
    with tempfile.TemporaryDirectory(prefix="graphtier-bench-tiering-") as root:
        for i, (label, (source, options)) in enumerate(graphs.items()):
            spec = source.format(args.shared)
            if spec.startswith(("edges:", "planetoid:")) and not Path(spec.split(":", 1)[1]).exists():
                print(f"skip {label}: {spec} not found")
                continue
            if spec.startswith("edges:"):
                options = {**options, "train_fraction": 0.1, "val_fraction": 0.05, "test_fraction": 0.1}
            t0 = time.perf_counter()
            prepare_dataset(
                PrepareConfig(source=spec, name=f"g{i}", undirected=True, source_options=options, root=root)
            )
            t_prepare = time.perf_counter() - t0
            ds = PreparedDataset.open(f"g{i}", root)
            t0 = time.perf_counter()
            report = build_tiering_report(
                ds, budget=args.budget, fanouts=fanouts, batch_size=args.batch_size, epochs=args.epochs
            )
            t_report = time.perf_counter() - t0
            rows.append((label, ds.manifest, report, t_prepare, t_report))

    print(
        f"\ngraphtier tiering benchmark  budget={args.budget} fanout={args.fanout} batch={args.batch_size} "
        f"epochs={args.epochs}  torch {torch.__version__}  {platform.processor() or platform.machine()}  "
        f"threads={torch.get_num_threads()}  (device tiers accounted)"
    )
    aware = f"wrpr k={fanouts[0]}"
    scores = ["wrpr", aware, "rpr", "degree", "source order", "oracle"]
    header = (
        f"{'graph':28s} {'nodes':>9s} {'edges':>10s} "
        + " ".join(f"{s[:14]:>14s}" for s in scores)
        + f" {'wrpr/oracle':>11s} {'wrpr-k/oracle':>13s} {'prep s':>7s} {'replay s':>8s}"
    )
    print(header)
    print("-" * len(header))
    for label, m, report, t_prepare, t_report in rows:
        hits = {o.score: o.hit_ratio for o in report.outcomes}
        ratio = report.outcome("wrpr").ratio_to_oracle
        ratio_aware = report.outcome(aware).ratio_to_oracle
        print(
            f"{label:28s} {m.num_nodes:9,d} {m.num_edges:10,d} "
            + " ".join(f"{hits.get(s, float('nan')):14.1%}" for s in scores)
            + f" {ratio:11.1%} {ratio_aware:13.1%} {t_prepare:7.1f} {t_report:8.1f}"
        )


if __name__ == "__main__":
    main()
