"""Film (Actor, Geom-GCN) node classification: test accuracy of the built-in GraphSAGE through real jobs.

For each Geom-GCN split K asked for (`film_split_0.6_0.2_K.npz`: 3,648 train, 2,432 val, 1,520 test
nodes), film is prepared from the original files under `--root` (`geomgcn:ROOT --split ...`, cached
under $TMPDIR/graphtier-bench/film), a daemon is started in a runtime folder of its own, and one
`graphtier job submit --model sage --nproc-per-node 2` job per seed trains on it. A job reports the
test accuracy of its evaluation with the best validation accuracy (the literature's model selection),
and of its last one; the figure is the mean over splits and seeds of the first, against the
literature's ~0.34-0.36 for GraphSAGE on film (Geom-GCN split protocol). Load and machine are printed
with every job, since the jobs share the machine's cores.

The files: bingzhewei/geom-gcn's `new_data/film/out1_node_feature_label.txt`,
`new_data/film/out1_graph_edges.txt` and `splits/film_split_0.6_0.2_K.npz` in one folder.

Run: python tests/bench/bench_film.py [--root /tmp/film-src] [--splits 0] [--seeds 0,1,2] [--json out.json]
(--quick: split 0, seed 0.)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch  # noqa: F401  (imported for machine_summary's torch version)
from machine import bench_cache, machine_summary, write_figures

LITERATURE = (0.34, 0.36)  # GraphSAGE on film, Geom-GCN splits (H2GCN's table: 34.2 +- 1.0)
EVALUATED = re.compile(r"^\[rank 0\] epoch (\d+) evaluated: .* accuracy val ([\d.]+), test ([\d.]+)", re.MULTILINE)


def prepare(root: Path, split: int, undirected: bool) -> str:
    """Film with Geom-GCN split `split`, prepared once under the bench cache; its name."""
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    split_file = root / f"film_split_0.6_0.2_{split}.npz"
    if not split_file.is_file():
        raise SystemExit(f"{split_file} is missing: --root must hold film's two text files and its split files")
    name = f"film-split{split}" + ("-undirected" if undirected else "")
    if not (bench_cache("film") / name / "manifest.json").exists():
        prepare_dataset(
            PrepareConfig(
                source=f"geomgcn:{root}",
                name=name,
                undirected=undirected,
                root=bench_cache("film"),
                overwrite=True,
                source_options={"split_file": str(split_file)},
            )
        )
    return name


def evaluations(log: str) -> list[tuple[float, float, int]]:
    """(val, test, epoch) of each of rank 0's evaluations in a job's log, in epoch order."""
    found = [(float(val), float(test), int(epoch)) for epoch, val, test in EVALUATED.findall(log)]
    if not found:
        raise SystemExit("the job's log has no 'epoch N evaluated: ... accuracy val V, test T' line")
    return found


def run_job(runtime_dir: Path, dataset: str, seed: int, a: argparse.Namespace) -> dict[str, object]:
    """One `job submit` job to the end: its best-validation and last evaluations (the job's result), and every
    epoch's (its log)."""
    from graphtier.launcher.client import DaemonClient

    command = [
        sys.executable, "-m", "graphtier.launcher.cli", "job", "submit", "--runtime-dir", str(runtime_dir), "--json",
        "--dataset", dataset, "--model", "sage", "--fanout", a.fanout, "--batch-size", str(a.batch_size),
        "--hidden", str(a.hidden), "--epochs", str(a.epochs), "--lr", str(a.lr), "--dropout", str(a.dropout),
        "--weight-decay", str(a.weight_decay), "--nproc-per-node", "2", "--seed", str(seed), "--name", "bench-film",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"graphtier {' '.join(command[3:])}: exit {done.returncode}\n{done.stdout}{done.stderr}")
    job_id = json.loads(done.stdout)["job_id"]
    with DaemonClient(runtime_dir=runtime_dir) as client:
        collections.deque(client.job_events(job_id, follow=True), maxlen=0)  # followed to the job's end
        job = client.get_job(job_id)
    log = Path(job.log_path).read_text()
    if job.state.value != "succeeded" or job.result is None:
        raise SystemExit(f"job {job_id} {job.state.value}: {job.message}\n{log[-2000:]}")
    best = job.result.best  # the evaluation with the highest validation accuracy (the earliest on ties)
    if best is None:
        raise SystemExit(f"job {job_id}: its result has no best validation epoch (does film have a val split?)")
    return {
        "val": best.val_accuracy,
        "test": best.test_accuracy,
        "epoch": best.epoch,
        "last_test": job.result.test_accuracy or 0.0,
        "all": evaluations(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=Path("/tmp/film-src"), help="folder of film's files")
    parser.add_argument("--splits", default="0", help="Geom-GCN split indices, e.g. 0 or 0,1,2 or 0-9")
    parser.add_argument("--seeds", default="0,1,2", help="job seeds per split")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--fanout", default="25,10")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.003)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--weight-decay", type=float, default=0.0)
    parser.add_argument("--undirected", action="store_true", help="prepare with the reverse of every edge added")
    parser.add_argument("--quick", action="store_true", help="split 0, seed 0")
    parser.add_argument("--json", help="write the figures here")
    a = parser.parse_args()
    if a.quick:
        a.splits, a.seeds = "0", "0"
    splits = _indices(a.splits)
    seeds = _indices(a.seeds)
    machine = machine_summary()
    print(
        f"machine: {machine['cpu']}, {machine['logical_cores']} logical cores ({machine['usable_cores']} usable), "
        f"python {machine['python']}, torch {machine.get('torch', '?')}, load average {machine['load_average']}"
    )
    print(
        f"GraphSAGE: fanout {a.fanout}, batch {a.batch_size}, hidden {a.hidden}, {a.epochs} epochs, lr {a.lr}, "
        f"dropout {a.dropout}, weight decay {a.weight_decay}, 2 ranks; edges "
        + ("made undirected" if a.undirected else "directed as listed")
    )
    from graphtier.service.daemon.config import DaemonConfig
    from graphtier.service.daemon.server import Daemon

    datasets = {split: prepare(a.root.expanduser(), split, a.undirected) for split in splits}
    work = Path(tempfile.mkdtemp(prefix="bench-film-"))
    daemon = Daemon(DaemonConfig(runtime_dir=work / "run", dataset_root=bench_cache("film")))
    daemon.start()
    results: list[dict[str, object]] = []
    try:
        for split in splits:
            for seed in seeds:
                result = run_job(work / "run", datasets[split], seed, a)
                results.append(result)
                print(
                    f"split {split} seed {seed}: test {result['test']:.4f} at the best val {result['val']:.4f} "
                    f"(epoch {result['epoch']}), last epoch's test {result['last_test']:.4f}; "
                    f"load average {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    by_epoch: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
    for result in results:
        for val, test, epoch in result["all"]:
            by_epoch[epoch].append((val, test))
    mean_val = {epoch: statistics.mean(v for v, _ in pairs) for epoch, pairs in sorted(by_epoch.items())}
    chosen = max(mean_val, key=lambda epoch: (mean_val[epoch], -epoch))
    print("mean val accuracy by epoch: " + ", ".join(f"{epoch}: {val:.4f}" for epoch, val in mean_val.items()))
    print(
        f"epoch {chosen} has the best mean val ({mean_val[chosen]:.4f}); mean test there "
        f"{statistics.mean(t for _, t in by_epoch[chosen]):.4f}"
    )
    tests = [r["test"] for r in results]
    mean = statistics.mean(tests)
    spread = statistics.stdev(tests) if len(tests) > 1 else 0.0
    low, high = LITERATURE
    verdict = "within" if low <= mean <= high else "outside"
    print(
        f"film test accuracy (best val): {mean:.4f} +- {spread:.4f} over {len(tests)} job(s) "
        f"({len(splits)} split(s) x {len(seeds)} seed(s)); {verdict} the literature's {low:.2f}-{high:.2f}; "
        f"last epoch's: {statistics.mean(r['last_test'] for r in results):.4f}"
    )
    write_figures(
        a.json,
        "film",
        [
            {
                "name": "film GraphSAGE test accuracy, Geom-GCN splits",
                "value": round(mean, 4),
                "unit": "accuracy",
                "baseline": f"literature {low:.2f}-{high:.2f}",
                "target": low,
                "spread": round(spread, 4),
                "splits": splits,
                "seeds": seeds,
            }
        ],
        command=" ".join(sys.argv),
    )


def _indices(text: str) -> list[int]:
    """`0`, `0,2,5` or `0-9`."""
    if "-" in text:
        first, last = text.split("-", 1)
        return list(range(int(first), int(last) + 1))
    return [int(part) for part in text.split(",")]


if __name__ == "__main__":
    main()
