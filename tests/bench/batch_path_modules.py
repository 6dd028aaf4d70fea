"""How many of graphtier's modules does a mini-batch pass through, from `job submit` to a training step?

Runs the real thing as a user would (CLI processes, a daemon, its producer processes and torchrun
ranks) on a small synthetic dataset, with a profile hook installed in every Python process
through a `sitecustomize` on PYTHONPATH. The hook counts the calls of graphtier functions by
module, per process, and this script reports by role:

  submit     -- the `graphtier job submit --wait` process: every module it ran;
  producer   -- the producer processes (sample, gather, fill the ping-pong slots) and
  rank       -- the torchrun trainer ranks (read a slot, build the batch, train a step): the
                modules called at least once per batch (as often as the job's batches, or more),
                which leaves out start-up and set-up code;
  batch path -- the union of the three: the modules a batch passes through.

The daemon and the other CLI processes are shown with every module they ran. The generated
gRPC code (`graphtier.v1`) is left out of every count.
Run: python tests/bench/batch_path_modules.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print the module lists as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="graphtier-batch-path-"))
    trace, hook_dir = work / "trace", work / "hook"
    trace.mkdir()
    hook_dir.mkdir()
    (hook_dir / "sitecustomize.py").write_text(HOOK)
    env = {
        **os.environ,
        "GRAPHTIER_HOME": str(work / "home"),
        "GRAPHTIER_MODULE_TRACE": str(trace),
        "PYTHONPATH": os.pathsep.join(p for p in (str(hook_dir), os.environ.get("PYTHONPATH", "")) if p),
    }
    cli = [sys.executable, "-m", "graphtier.launcher.cli"]

    def run(*argv: str) -> str:
        done = subprocess.run([*cli, *argv], env=env, check=True, capture_output=True, text=True, timeout=600)
        return done.stdout

    run("dataset", "prepare", "synthetic:rmat", "--name", "tiny", "--scale", "12", "--undirected")
    run("cluster", "start")
    try:
        job = json.loads(
            run(
                "job",
                "submit",
                "--dataset",
                "tiny",
                "--fanout",
                "5,5",
                "--batch-size",
                "16",
                "--epochs",
                "2",
                "--nproc-per-node",
                str(RANKS),
                "--wait",
                "--json",
            )
        )
    finally:
        run("cluster", "stop")
    steps_per_rank = job["progress"]["total_steps"]

    calls: dict[str, Counter[str]] = {}
    processes: Counter[str] = Counter()
    for path in trace.glob("*.json"):
        record = json.loads(path.read_text())
        name = role(record["argv"], record["forked"])
        processes[name] += 1
        calls.setdefault(name, Counter()).update(record["calls"])
    # A module a batch passes through is called at least once per batch in the process that handles it:
    # in a producer or a rank, at least as often as the steps that process made (all of that role's processes together).
    per_batch = {
        name: {m for m, n in calls.get(name, Counter()).items() if n >= steps_per_rank * RANKS}
        for name in ("producer", "rank")
    }
    submit = set(calls.get("submit", Counter()))
    batch_path = submit | per_batch["producer"] | per_batch["rank"]
    report = {
        "steps per rank": steps_per_rank,
        "processes": dict(processes),
        "modules run, by role": {name: len(c) for name, c in sorted(calls.items())},
        "per-batch modules": {name: sorted(m) for name, m in per_batch.items()},
        "submit modules": sorted(submit),
        "batch path": len(batch_path),
    }
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        for name, n in report["modules run, by role"].items():
            print(f"{name:>24}: {n} modules run ({processes[name]} process(es))")
        for name, mods in per_batch.items():
            print(f"{name + ', every batch':>24}: {len(mods)} modules")
        print(f"{'batch path':>24}: {len(batch_path)} modules (submit process | producer and rank every batch)")
    if args.keep:
        print(f"trace kept in {trace}")
    else:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
