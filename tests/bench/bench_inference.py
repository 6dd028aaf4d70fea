"""Layer-wise inference of every node against 3 training epochs of the same job (issue 36's figure).

One daemon (in this process), one prepared R-MAT dataset (`--scale`, edge
factor 12, 128 float32 features, its synthetic labels and 10/5/5 split), 2 ranks:

(a) training: GraphSAGE 3 x 256 (fanout 15,10,5, batch 1024, Adam lr 0.003, dropout 0.5), 3 epochs;
(b) inference: `graphtier job predict` of that job -- every node's embeddings and predictions, layer
    by layer over full neighbourhoods, layer 0's features through the tiers, written in the source's ids.

Figures: each job's wall time (its started_at to finished_at: ranks' start-up included in both),
their ratio (inference over training; target <= 1), and the peak memory of each job's processes --
the sum of their proportional set sizes (PSS: shared pages split among the processes mapping them,
so the daemon's dataset segments count mostly to the daemon) over its ranks and producers, sampled
every 0.2 s -- beside the memory bound the daemon sizes the training job by (`memory_need`: its
agent, ranks, producers and slots). The load average is printed with each figure.

Run: python tests/bench/bench_inference.py [--scale 20] [--json out.json]
     python tests/bench/bench_inference.py --quick    (scale 15, batch 256: a smoke run)
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from pathlib import Path

import psutil
from machine import bench_cache, write_figures

FEATURE_DIM = 128


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def prepare(root: Path, scale: int) -> str:
    """R-MAT `scale` (cached under `root`); its name."""
    from graphtier.service.hotness import ScoreSpec
    from graphtier.service.prepared import PrepareConfig, prepare_dataset

    name = f"infer-rmat{scale}"
    if not (root / name / "manifest.json").exists():
        print(f"preparing {name} under {root}", flush=True)
        prepare_dataset(
            PrepareConfig(
                source="synthetic:rmat",
                name=name,
                undirected=True,
                score=ScoreSpec(kind="wrpr"),
                source_options={"scale": scale, "feature_dim": FEATURE_DIM, "test_fraction": 0.05},
                root=root,
            )
        )
    return name


def pss(pid: int) -> int:
    """Bytes of `pid`'s proportional set size (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PeakMemory:
    """The peak over time of the summed PSS of a job's ranks and producers, sampled on a thread."""

    def __init__(self, client: object, job_id: str) -> None:
        self.client, self.job_id, self.peak = client, job_id, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _pids(self) -> set[int]:
        ranks = {p.pid for p in psutil.Process().children(recursive=True) if "rank_main" in " ".join(_cmdline(p))}
        producers = {r.producer_pid for r in self.client.get_job(self.job_id).ranks if r.producer_pid}
        return ranks | producers

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, sum(pss(pid) for pid in self._pids()))
            except (psutil.Error, OSError):  # a process gone between listing and reading it
                pass
            self._stop.wait(0.2)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def run_job(client: object, spec: object) -> tuple[object, int]:
    """Submit `spec`, follow it to its end; (its JobInfo, peak memory of its processes)."""
    job = client.submit_job(spec)
    peak = PeakMemory(client, job.job_id)
    for _ in client.job_events(job.job_id, follow=True):
        pass
    final = client.get_job(job.job_id)
    memory = peak.stop()
    if final.state.value != "succeeded":
        raise SystemExit(
            f"job {job.job_id} {final.state.value}: {final.message}\n{Path(final.log_path).read_text()[-3000:]}"
        )
    return final, memory


def wall(job: object) -> float:
    return (job.finished_at - job.started_at).total_seconds()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("prepared"), help="prepared dataset root (a cache)")
    p.add_argument("--scale", type=int, default=20)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--chunk", type=int, default=None, help="destinations per inference chunk (default: job predict's)")
    p.add_argument("--quick", action="store_true", help="scale 15, batch 256: a smoke run")
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args(argv)
    if a.quick:
        a.scale, a.batch_size = 15, 256
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    import tempfile

    from graphtier.contract.inference import DEFAULT_CHUNK
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.client import DaemonClient
    from graphtier.service.daemon.config import DaemonConfig
    from graphtier.service.daemon.jobs.memory_need import memory_need
    from graphtier.service.daemon.server import Daemon

    dataset = prepare(a.root, a.scale)
    with tempfile.TemporaryDirectory(prefix="bench-inference-") as work:
        daemon = Daemon(DaemonConfig(runtime_dir=Path(work) / "run", dataset_root=a.root))
        daemon.start()
        try:
            with DaemonClient(runtime_dir=daemon.config.runtime_dir) as client:
                fanouts = [int(k) for k in a.fanouts.split(",")]
                spec = JobSpec(
                    dataset=dataset, model="sage", fanouts=fanouts, batch_size=a.batch_size, hidden=a.hidden,
                    epochs=a.epochs, nproc_per_node=a.ranks, name="bench-inference-train",
                )  # fmt: skip
                print(f"training: {a.epochs} epochs of sage {len(fanouts)}x{a.hidden} on {dataset}, load {load()}")
                trained, train_peak = run_job(client, spec)
                chunk = a.chunk or DEFAULT_CHUNK
                print(f"inference of job {trained.job_id}, chunks of {chunk}, load {load()}")
                inferred, infer_peak = run_job(
                    client,
                    JobSpec(dataset=dataset, from_job=trained.job_id, batch_size=chunk, nproc_per_node=a.ranks),
                )
                plan = daemon.datasets.layout(dataset).handle.plan
        finally:
            daemon.stop()
    bound = memory_need(trained.spec, plan, limit=0, held=0).job_bytes
    train_s, infer_s = wall(trained), wall(inferred)
    gib = 1 << 30
    print(f"training  {train_s:8.1f} s wall ({trained.result.train_seconds:.1f} s in its ranks), peak "
          f"{train_peak / gib:.2f} GiB; test accuracy {trained.result.test_accuracy:.4f}")  # fmt: skip
    print(f"inference {infer_s:8.1f} s wall ({inferred.result.train_seconds:.1f} s in its ranks), peak "
          f"{infer_peak / gib:.2f} GiB; predictions' test accuracy {inferred.result.test_accuracy:.4f}")  # fmt: skip
    print(f"inference / {a.epochs} epochs: {infer_s / train_s:.3f} (target <= 1); peak {infer_peak / gib:.2f} GiB "
          f"against the job's bound {bound / gib:.2f} GiB; load {load()}")  # fmt: skip
    write_figures(
        a.json,
        "inference",
        [
            {
                "name": f"inference wall time / {a.epochs} training epochs",
                "value": infer_s / train_s,
                "unit": "x",
                "target": 1.0,
                "better": "lower",
                "baseline": f"{a.epochs} epochs",
            },
            {"name": "inference wall time", "value": infer_s, "unit": "s"},
            {"name": f"{a.epochs} training epochs wall time", "value": train_s, "unit": "s"},
            {
                "name": "inference peak memory / the job's bound",
                "value": infer_peak / bound,
                "unit": "x",
                "target": 1.0,
                "better": "lower",
            },
            {"name": "inference peak memory", "value": infer_peak / gib, "unit": "GiB"},
            {"name": "training peak memory", "value": train_peak / gib, "unit": "GiB"},
        ],  # fmt: skip
        scale=a.scale,
        ranks=a.ranks,
    )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
