"""How many of graphtier's modules does a mini-batch pass through, in the daemon, producers and ranks?

Runs the real thing as a user would (CLI processes, a daemon, its producer processes and torchrun
ranks) on a small synthetic dataset, with a profile hook installed in every Python process
through a `sitecustomize` on PYTHONPATH. The hook counts the calls of graphtier functions by
module, per process. The same job (2 epochs) runs twice, each on a fresh daemon, with batches of
16 and of 8 seeds: the second has twice the batches and the same epochs, evaluations and start-up.
A module is on the batch path of a role when its calls in that role's processes grow by at least
one per extra batch -- code called for every batch, not per epoch or at start-up:

  daemon     -- the daemon (its servicers, job manager and progress reports),
  producer   -- the producer processes (sample, gather, fill the ping-pong slots),
  rank       -- the torchrun trainer ranks (read a slot, build the batch, train a step);
  batch path -- the union of the three: the modules a batch passes through.

The daemon's pollers (it reads every producer's control block on a timer) are called in
proportion to the job's running time, which grows with its batches too: they may count or not
from one run to the next (their calls grow ~1.06x for 2x the batches), so the producers and
ranks alone, the processes a batch's rows pass through, are reported beside the union.

The CLI's processes are not on the batch path; the `job submit` process is shown with every
module it ran. The generated gRPC code (`graphtier.v1`) is left out of every count.
Run: python tests/bench/batch_path_modules.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

RANKS = 2  # trainer ranks, one producer each
HOOK = r"""
import atexit, collections, os, sys, threading
_out = os.environ["GRAPHTIER_MODULE_TRACE"]
_calls = collections.Counter()
_started_as = os.getpid()
_since_dump = [0]
def _dump():
    import json
    path = os.path.join(_out, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump({"argv": sys.argv, "forked": os.getpid() != _started_as, "calls": dict(_calls)}, f)
    os.replace(path + ".tmp", path)
def _hook(frame, event, arg):
    if event == "call":
        name = frame.f_globals.get("__name__") or ""
        if name.startswith("graphtier.") and not name.startswith("graphtier.v1."):
            new = name not in _calls
            _calls[name] += 1
            _since_dump[0] += 1
            if new or _since_dump[0] >= 500:
                _since_dump[0] = 0
                _dump()
sys.setprofile(_hook)
threading.setprofile(_hook)
atexit.register(_dump)
"""


def role(argv: list[str], forked: bool) -> str:
    """A process's part, from its command line; producers are forked from the daemon's fork server."""
    joined = " ".join(argv)
    if forked:
        return "producer"
    if argv == ["-c"]:
        return "fork server"
    if "job" in argv and "submit" in argv:
        return "submit"
    if "rank_main" in joined:
        return "rank"
    if "daemon" in joined or "graphtierd" in joined:
        return "daemon"
    return "other:" + " ".join(Path(a).name for a in argv[:3])


ROLES = ("daemon", "producer", "rank")
BATCH_SIZES = (16, 8)  # the two runs: the second has twice the batches, the same epochs


def run_job(work: Path, batch_size: int) -> tuple[int, dict[str, Counter[str]], Counter[str]]:
    """A 2-epoch job of `batch_size`-seed batches on a fresh daemon: steps per rank, each role's calls by module."""
    trace = work / f"trace-{batch_size}"
    trace.mkdir()
    env = {
        **os.environ,
        "GRAPHTIER_HOME": str(work / "home"),
        "GRAPHTIER_MODULE_TRACE": str(trace),
        "PYTHONPATH": os.pathsep.join(p for p in (str(work / "hook"), os.environ.get("PYTHONPATH", "")) if p),
    }

    def run(*argv: str) -> str:
        cli = [sys.executable, "-m", "graphtier.launcher.cli"]
        done = subprocess.run([*cli, *argv], env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise SystemExit(f"graphtier {' '.join(argv)}: exit {done.returncode}\n{done.stdout}{done.stderr}")
        return done.stdout

    if not (work / "home").exists():
        run("dataset", "prepare", "synthetic:rmat", "--name", "tiny", "--scale", "12", "--undirected")
    run("cluster", "start")
    try:
        flags = ["--dataset", "tiny", "--fanout", "5,5", "--batch-size", str(batch_size), "--epochs", "2"]
        job = json.loads(run("job", "submit", *flags, "--nproc-per-node", str(RANKS), "--wait", "--json"))
    finally:
        run("cluster", "stop")
    calls: dict[str, Counter[str]] = {}
    processes: Counter[str] = Counter()
    for path in trace.glob("*.json"):
        record = json.loads(path.read_text())
        name = role(record["argv"], record["forked"])
        processes[name] += 1
        calls.setdefault(name, Counter()).update(record["calls"])
    return int(job["progress"]["total_steps"]), calls, processes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the module lists as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="graphtier-batch-path-"))
    (work / "hook").mkdir()
    (work / "hook" / "sitecustomize.py").write_text(HOOK)
    try:
        (few_steps, few, _), (many_steps, many, processes) = (run_job(work, size) for size in BATCH_SIZES)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    extra_batches = (many_steps - few_steps) * RANKS  # each rank trains its own batches; one producer each
    per_batch = {
        name: sorted(
            m for m, n in many.get(name, Counter()).items() if n - few.get(name, Counter()).get(m, 0) >= extra_batches
        )
        for name in ROLES
    }
    batch_path = set().union(*per_batch.values())
    data_path = set(per_batch["producer"]) | set(per_batch["rank"])
    report = {
        "steps per rank, by batch size": {str(b): s for b, s in zip(BATCH_SIZES, (few_steps, many_steps), strict=True)},
        "processes": dict(processes),
        "modules run, by role": {name: len(c) for name, c in sorted(many.items())},
        "per-batch modules": per_batch,
        "calls, by role (batch 16, batch 8)": {
            name: {m: [few.get(name, Counter()).get(m, 0), n] for m, n in sorted(many.get(name, Counter()).items())}
            for name in ROLES
        },
        "submit modules": sorted(many.get("submit", Counter())),
        "batch path": len(batch_path),
        "producers and ranks": len(data_path),
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for name, n in report["modules run, by role"].items():
            print(f"{name:>24}: {n} modules run ({processes[name]} process(es))")
        for name, mods in per_batch.items():
            print(f"{name + ', every batch':>24}: {len(mods)} modules")
        print(f"{'batch path':>24}: {len(batch_path)} modules (daemon, producers and ranks, every batch)")
        print(f"{'producers and ranks':>24}: {len(data_path)} modules (what a batch's rows pass through)")
    if args.keep:
        print(f"traces kept in {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
