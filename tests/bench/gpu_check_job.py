"""The job step of tests/bench/gpu_check.sh in two lines: how the job went (its figures), and what the
machine did not let it use (one note per line of the lacked file, written by gpu_check.sh).

    python3 tests/bench/gpu_check_job.py JOB.json LACKED.txt

JOB.json is `graphtier job submit --wait --json`'s output. Exit status 0 when it succeeded, else 1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def summary(job: dict) -> str:
    """One line: state, steps, seconds, steps/s, accuracy, and where the rows came from."""
    result, progress = job.get("result") or {}, job.get("progress") or {}
    steps, seconds = progress.get("global_step", 0), result.get("train_seconds", 0.0)
    rate = steps / seconds if seconds else 0.0
    line = (
        f"job {job.get('job_id', '?')}: {job.get('state', '?')}, {steps} steps in {seconds:.1f} s = {rate:.2f} steps/s"
        f" (last {progress.get('batches_per_second', 0.0):.2f} batches/s), val {result.get('val_accuracy', 0.0):.3f}"
    )
    traffic = progress.get("traffic") or {}
    sources = {k: v.get("bytes", 0) for k, v in traffic.items() if isinstance(v, dict) and v.get("bytes")}
    if sources:
        line += "; bytes " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in sources.items())
        line += " (simulated)" if traffic.get("simulated") else ""
    if job.get("message"):
        line += f"; {job['message']}"
    return line


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    lacked = [line.strip() for line in Path(argv[1]).read_text().splitlines() if line.strip()]
    try:
        job = json.loads(Path(argv[0]).read_text())
    except (OSError, ValueError) as exc:
        print(f"job: no JSON from the job ({type(exc).__name__}: {exc}); see job.log")
        job = {}
    if job:
        print(summary(job))
    print("lacked: " + ("; ".join(lacked) if lacked else "nothing"))
    return 0 if job.get("state") == "succeeded" else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
