"""Does the public loader API cost anything? Built-in GraphSAGE vs the same model in a user's script.

One daemon (in this process, real producers and torchrun ranks), one dataset, one spec and seed;
three jobs alternate for `--reps` rounds:
  builtin  -- `model: sage`, the built-in loop (`job.fit`);
  own-loop -- a script with its own loop over `graphtier.launcher.loader`, training the built-in
              GraphSAGE module (so only the loop and the API differ);
  example  -- examples/sage_blocks.py (a plain-PyTorch GraphSAGE of the same math).
The figure is each rank's training steps/s per epoch (epochs after the first; from the
`epoch N trained: ... batches/s` lines), median over ranks, epochs and rounds, as a ratio to the
built-in one measured in the same run (issue 11 target: >= 0.95), plus the test accuracies.

Run: python tests/bench/bench_script_api.py [--scale 15] [--feature-dim 128] [--epochs 4] [--reps 3]
     [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import tempfile
from pathlib import Path

import torch
from machine import cpu_model, write_figures

REPO_ROOT = Path(__file__).resolve().parents[2]
OWN_LOOP = """
import torch, torch.nn.functional as F
from graphtier.launcher import loader
from graphtier.launcher.runtime.models import build_model

with loader.connect() as job:
    s, d = job.spec, job.dataset
    model = build_model("sage", d.feature_dim, s.hidden, d.num_classes, len(d.fanouts), s.dropout, s.heads)
    optimizer = torch.optim.Adam(model.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    model = job.prepare(model, optimizer)
    for epoch in job.epochs():
        for batch in job.batches(epoch):
            logits = model(batch.blocks, batch.x)
            loss = F.cross_entropy(logits, batch.y, ignore_index=-1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            job.step(loss, logits)
        job.evaluate(model)
"""


def rates(log: str) -> list[float]:
    return [float(r) for e, r in re.findall(r"\] epoch (\d+) trained: .* ([\d.]+) batches/s", log) if e != "0"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=int, default=15)
    p.add_argument("--feature-dim", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="scale 12, 2 epochs, 1 round: a smoke run")
    p.add_argument("--json", help="also write the figures as JSON here")
    args = p.parse_args()
    if args.quick:
        args.scale, args.epochs, args.reps = 12, 2, 1

    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.client import DaemonClient
    from graphtier.service.daemon.config import DaemonConfig
    from graphtier.service.daemon.server import Daemon
    from graphtier.service.hotness import ScoreSpec
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    with tempfile.TemporaryDirectory(prefix="bench-script-api-") as tmp:
        root, name = Path(tmp) / "prepared", f"rmat{args.scale}"
        prepare_dataset(
            PrepareConfig(
                source="synthetic:rmat",
                name=name,
                undirected=True,
                score=ScoreSpec(kind="wrpr"),
                source_options={"scale": args.scale, "feature_dim": args.feature_dim},
                root=root,
            )
        )
        own_loop = Path(tmp) / "own_loop.py"
        own_loop.write_text(OWN_LOOP)
        spec = dict(
            dataset=name,
            fanouts=[10, 5],
            batch_size=args.batch_size,
            hidden=256,
            epochs=args.epochs,
            nproc_per_node=args.ranks,
            seed=0,
        )
        kinds = {
            "builtin": {},
            "own-loop": {"script": str(own_loop)},
            "example": {"script": str(REPO_ROOT / "examples" / "sage_blocks.py")},
        }
        seen: dict[str, list[float]] = {k: [] for k in kinds}
        accuracy: dict[str, list[float]] = {k: [] for k in kinds}
        daemon = Daemon(DaemonConfig(runtime_dir=Path(tmp) / "run", dataset_root=root))
        daemon.start()
        try:
            with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
                for rep in range(args.reps):
                    for kind, extra in kinds.items():
                        job = client.submit_job(JobSpec(**spec, **extra))
                        for _ in client.job_events(job.job_id, follow=True):
                            pass
                        done = client.get_job(job.job_id)
                        if done.state.value != "succeeded":
                            raise SystemExit(f"{kind} job failed: {done.message}")
                        seen[kind] += rates(Path(done.log_path).read_text())
                        accuracy[kind].append(done.result.test_accuracy)
                        print(
                            f"round {rep + 1} {kind}: {statistics.median(rates(Path(done.log_path).read_text())):.1f} "
                            f"steps/s per rank, test {done.result.test_accuracy:.4f}",
                            flush=True,
                        )
        finally:
            daemon.stop()

    print(f"\nmachine: {cpu_model()}, {platform.machine()}; torch {torch.__version__}")
    print(
        f"R-MAT scale {args.scale}, {args.feature_dim} features; GraphSAGE 2x256, fanout 10,5, batch "
        f"{args.batch_size}, {args.ranks} ranks, {args.epochs} epochs x {args.reps} rounds"
    )
    base = statistics.median(seen["builtin"])
    print(f"{'job':<10}{'steps/s/rank':>14}{'/ builtin':>11}{'test acc (rounds)':>30}")
    for kind in kinds:
        med = statistics.median(seen[kind])
        print(f"{kind:<10}{med:>14.1f}{med / base:>10.2f}x  {', '.join(f'{a:.4f}' for a in accuracy[kind]):>28}")
    print("target: own-loop and example >= 0.95x builtin, accuracy within noise")
    load = round(os.getloadavg()[0], 2)
    write_figures(
        args.json,
        "built-in model vs a user's script",
        [
            {
                "name": f"{kind} job, R-MAT scale {args.scale}, steps/s per rank (median of {args.reps} rounds)",
                "value": round(statistics.median(seen[kind]) / base, 2),
                "unit": "x",
                "baseline": "the built-in GraphSAGE job",
                "target": 0.95,
                "load_average": load,
            }
            for kind in ("own-loop", "example")
        ],
        command=f"python tests/bench/bench_script_api.py --scale {args.scale} --epochs {args.epochs} "
        f"--reps {args.reps}",
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
