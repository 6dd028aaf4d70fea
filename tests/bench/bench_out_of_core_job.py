"""A job whose features are twice the memory it may use, against the same job in memory and through the mapping.

One run, one prepared R-MAT dataset (`--scale`, `--feature-dim` float32 features: scale 20 x
1024 = 4 GiB), one job spec (GraphSAGE, `--fanout`, `--batch-size`, `--hidden`, `--epochs`,
one rank), three daemons started one after the other, each with its own runtime directory:

(a) memory:  no limit; every feature row in host shared memory (the default budgets).
(b) mapped:  the daemon and its job under a memory limit of half the feature bytes (a cgroup
             made for the run, see memory_limit.py: the daemon joins it before it execs, so its
             producers, torchrun and the ranks are inside too; shared memory and page cache are
             charged to it, and the daemon takes it as its `--memory-limit`); `--host-budget` of the
             rows in host memory, the rest read through the file's mapping (`storage_reads: mmap`,
             no window).
(c) direct:  the same limit and host budget; storage rows read with O_DIRECT, `--window`
             batches of look-ahead (`storage_reads: direct`, `window: N`), the producer's staging
             buffer and window cache sized by the daemon from what the limit leaves.

The host budget (`auto`) is the limit less the structure, the daemon's own memory and the job's
fixed need as the daemon computes it (graphtier.service.daemon.jobs.memory_need) and a little for
the window. A limit below the job's fixed need is refused at submit: the run is reported as
refused with the daemon's one line (the least that works), not as a failure.

The features file's pages are dropped from the page cache before each run, so no run reads
what another left cached. Throughput is training's: the ranks' own batches per second over the epoch (GetJob `ranks`,
waits for data included, the evaluation after it not; the daemon's whole-run figure, which
includes the evaluation, is printed beside); beside it the storage tier's counters the daemon
reports (rows read, window hits, requests, queue depth, bandwidth, read amplification: device
bytes over the bytes of the rows read) and the cgroup's peak memory.
Targets: (c) >= 0.5x (a) and >= 3x (b); read amplification of (c) <= 2x.

`--quick` (for `python -m tests.bench.all`): scale 19 (2 GiB of features) under 1 GiB, which the
daemon must refuse naming the least that works, then the three runs under 1.75 GiB.

With `--verify-cost`, the runs named by `--only` (mapped, direct) are each made `--rounds` times on
the dataset as prepared (every storage row checked against its recorded checksum when read) and,
interleaved with them, on the same files without the checksums (a copy of the directory whose files
are hard links and whose manifest lists no `feature_checksums`, as a dataset prepared before they
were recorded): the ratio of the medians is the cost of the verification. Target >= 0.9x.

Run: python tests/bench/bench_out_of_core_job.py [--scale 20] [--feature-dim 1024] [--window 4]
     [--host-budget auto] [--limit auto] [--quick] [--json FILE]
     [--root $TMPDIR/graphtier-bench/ooc/datasets] [--verify-cost --rounds 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import bench_cache, cpu_model, write_figures
from memory_limit import MemoryLimit, unavailable

from graphtier.contract.datasets import BudgetSpec
from graphtier.contract.endpoints import read_endpoints
from graphtier.contract.errors import DaemonRequestError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client import DaemonClient
from graphtier.service.daemon.jobs.memory_need import memory_need
from graphtier.service.placement import PlacementPlan, parse_budget
from graphtier.service.prepared import PreparedDataset
from graphtier.service.prepared.manifest import MANIFEST_FILE
from graphtier.service.storage.row_checksums import CHECKSUM_ARRAY

REPO_ROOT = Path(__file__).resolve().parents[2]
GiB, MiB = 2**30, 2**20
DAEMON_BYTES = 384 * MiB  # the daemon's own memory with a dataset loaded (RSS 276-382 MiB measured)
WINDOW_ALLOWANCE = 64 * MiB  # beside the host tier, for the window's cache: the coldest rows recur little


@dataclass
class Outcome:
    """One job's figures, as the daemon reported them."""

    label: str
    state: str
    batches: int
    batches_per_second: float  # training: the ranks' batches/s over the (last) epoch, summed
    daemon_batches_per_second: float  # the job's whole-run figure (/v1/status), evaluation included
    wall_s: float
    storage: dict[str, object]
    storage_rows_gathered: int
    gathered_bytes: int
    peak_bytes: int | None
    oom_kills: int | None
    message: str = ""  # why it did not succeed (a refusal's one line)

    @property
    def read_amplification(self) -> float:
        return float(self.storage.get("read_amplification", 0.0))


def ensure_dataset(root: Path, scale: int, dim: int) -> PreparedDataset:
    """The bench dataset, prepared once under `root` (few train ids: an epoch is tens of batches; and few
    val/test ids: evaluation, which reads features too, stays short)."""
    name = f"ooc{scale}" + ("" if dim == 1024 else f"-d{dim}")
    try:
        return PreparedDataset.open(name, root)
    except Exception:  # not prepared yet, or damaged: prepare it again
        pass
    print(f"preparing {name} under {root} (once) ...", flush=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.launcher.cli",
            "dataset",
            "prepare",
            "synthetic:rmat",
            "--name",
            name,
            "--scale",
            str(scale),
            "--undirected",
            "--feature-dim",
            str(dim),
            "--train-fraction",
            "0.02",
            "--val-fraction",
            "0.002",
            "--test-fraction",
            "0.002",
            "--memory-budget",
            "3GiB",
            "--out",
            str(root),
        ],
        check=True,
    )
    return PreparedDataset.open(name, root)


def unchecked_copy(dataset: PreparedDataset, root: Path) -> PreparedDataset:
    """The same files under `<name>-unchecked` (hard links), the manifest without the row checksums."""
    name = f"{dataset.name}-unchecked"
    target = root / name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    manifest = dataset.manifest.model_copy(deep=True)
    manifest.name = name
    manifest.arrays.pop(CHECKSUM_ARRAY, None)
    for info in manifest.arrays.values():
        os.link(dataset.directory / info.file, target / info.file)
    (target / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2))
    return PreparedDataset.open(name, root)


def drop_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_job(label: str, dataset: PreparedDataset, spec: JobSpec, root: Path, limit: MemoryLimit | None) -> Outcome:
    """Start a daemon (inside `limit` when given), run `spec` to its end, read its figures, stop the daemon."""
    drop_cache(dataset.array_path("features"))
    run_dir = Path(tempfile.mkdtemp(prefix=f"gt-ooc-{label}-"))
    log = open(run_dir / "daemon.out", "w")  # closed below
    daemon = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(run_dir / "run"),
            "--dataset-root",
            str(root),
            "--state-dir",
            str(run_dir / "state"),
            "--producer-stall-timeout",
            "600",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=limit.preexec if limit else None,
    )
    try:
        deadline = time.monotonic() + 120
        while read_endpoints(run_dir / "run") is None:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{label}: the daemon did not start; see {run_dir / 'daemon.out'}")
            time.sleep(0.2)
        with DaemonClient(runtime_dir=run_dir / "run") as client:
            client.wait_until_serving(60)
            started = time.monotonic()
            try:
                job_id = client.submit_job(spec).job_id
            except DaemonRequestError as exc:  # refused at submit: the limit cannot hold the job
                return Outcome(label, "refused", 0, 0.0, 0.0, 0.0, {}, 0, 0, None, None, message=exc.message)
            while not (info := client.get_job(job_id)).state.final:
                time.sleep(1.0)
            wall = time.monotonic() - started
            job = next(j for j in client.status().jobs if j.job_id == job_id)
        if info.state.value != "succeeded":
            print(f"{label}: job {info.state.value}: {info.message}; log {info.log_path}", flush=True)
        return Outcome(
            label=label,
            state=info.state.value,
            batches=job.batches_total,
            batches_per_second=sum(r.batches_per_second for r in info.ranks),
            daemon_batches_per_second=job.batches_per_second,
            wall_s=wall,
            storage=job.storage.model_dump(),
            storage_rows_gathered=job.traffic.sources["storage"].rows,
            gathered_bytes=job.traffic.total_bytes,
            peak_bytes=limit.peak_bytes() if limit else None,
            oom_kills=limit.oom_kills() if limit else None,
            message=info.message,
        )
    finally:
        daemon.terminate()
        try:
            daemon.wait(120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        log.close()
        shutil.rmtree(run_dir, ignore_errors=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=bench_cache("ooc", "datasets"))
    p.add_argument("--scale", type=int, default=20)
    p.add_argument("--feature-dim", type=int, default=1024)
    p.add_argument("--limit", default="auto", help="memory limit of daemon + job; auto = half the feature bytes")
    p.add_argument(
        "--host-budget",
        default="auto",
        help="host-tier feature bytes; auto = the limit less the structure and --reserve",
    )
    p.add_argument(
        "--reserve",
        default="auto",
        help="what the processes, slots and window need besides the tiers; auto = the daemon's estimate",
    )
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--fanout", default="10,5")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--only", default="memory,mapped,direct", help="which runs, comma-separated")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument(
        "--verify-cost",
        action="store_true",
        help="each run of --only with and without the row checksums, interleaved --rounds times",
    )
    p.add_argument("--rounds", type=int, default=2, help="rounds of --verify-cost")
    p.add_argument(
        "--quick", action="store_true", help="scale 19: its refusal under 1 GiB, then the runs under 1.75 GiB"
    )
    a = p.parse_args(argv)
    if a.quick:
        a.scale, a.feature_dim, a.limit, a.refusal_limit = 19, 1024, "1.75GiB", "1GiB"
    else:
        a.refusal_limit = None
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    why = unavailable()
    if why:
        print(f"cannot limit memory here: {why}; run this under `systemd-run --scope -p MemoryMax=...` instead")
        return 2
    dataset = ensure_dataset(a.root, a.scale, a.feature_dim)
    m = dataset.manifest
    feature_bytes = m.num_nodes * m.feature_row_bytes
    structure_bytes = sum(dataset.array_path(n).stat().st_size for n in ("colptr", "row", "labels"))
    limit = (
        feature_bytes // 2 if a.limit == "auto" else parse_budget(a.limit, total_bytes=feature_bytes, what="--limit")
    )
    fanouts = [int(f) for f in a.fanout.split(",")]
    base = JobSpec(
        dataset=dataset.name,
        model="sage",
        fanouts=fanouts,
        batch_size=a.batch_size,
        hidden=a.hidden,
        epochs=a.epochs,
        nproc_per_node=1,
        name="ooc-bench",
    )
    host = host_budget(a, base, dataset, limit, structure_bytes)
    limited = BudgetSpec(host=str(host))
    specs = {
        "memory": (base, None),
        "mapped": (base.model_copy(update={"budgets": limited, "storage_reads": "mmap", "window": 0}), limit),
        "direct": (base.model_copy(update={"budgets": limited, "storage_reads": "direct", "window": a.window}), limit),
    }
    load_before = os.getloadavg()
    print(
        f"machine: {cpu_model()}, {os.cpu_count()} cores; load average {load_before[0]:.2f} {load_before[1]:.2f} "
        f"{load_before[2]:.2f}"
    )
    print(
        f"dataset {dataset.name}: {m.num_nodes:,} nodes, {m.num_edges:,} edges, features {feature_bytes / GiB:.2f} GiB "
        f"({m.feature_row_bytes} B rows), structure+labels {structure_bytes / GiB:.2f} GiB"
    )
    print(
        f"limit {limit / GiB:.2f} GiB (features / limit = {feature_bytes / limit:.2f}); host tier {host / GiB:.2f} GiB "
        f"= {host / feature_bytes:.1%} of the rows; job: sage fanout {a.fanout} batch {a.batch_size} hidden {a.hidden} "
        f"epochs {a.epochs}, 1 rank"
    )
    if a.verify_cost:
        return verify_cost(a, dataset, specs)
    outcomes: dict[str, Outcome] = {}
    if a.refusal_limit:  # the job under a limit below its fixed need: refused at submit, naming the least
        small = parse_budget(a.refusal_limit, total_bytes=feature_bytes, what="--limit")
        spec = specs["direct"][0].model_copy(update={"budgets": BudgetSpec(host="0")})
        with MemoryLimit("graphtier-bench-refused", small) as cgroup:
            outcomes["refused"] = o = run_job("refused", dataset, spec, a.root, cgroup)
        print(f"under {small / GiB:.2f} GiB: {o.state}: {o.message}", flush=True)
    for label in a.only.split(","):
        spec, limit_bytes = specs[label]
        if limit_bytes is None:
            outcomes[label] = run_job(label, dataset, spec, a.root, None)
        else:
            with MemoryLimit(f"graphtier-bench-{label}", limit_bytes) as cgroup:
                print(f"{label}: memory limit {cgroup.how}", flush=True)
                outcomes[label] = run_job(label, dataset, spec, a.root, cgroup)
        o = outcomes[label]
        if o.state == "refused":
            print(f"{label:7s} refused at submit: {o.message}", flush=True)
            continue
        s = o.storage
        peak = f"{o.peak_bytes / GiB:.2f} GiB" if o.peak_bytes is not None else "-"
        print(
            f"{label:7s} {o.state}: {o.batches} batches, {o.batches_per_second:.3f} batches/s training "
            f"({o.daemon_batches_per_second:.3f} whole run), {o.wall_s:.0f} s; "
            f"storage rows gathered {o.storage_rows_gathered:,}: read {s['read_rows']:,} "
            f"({s['read_bytes'] / GiB:.2f} GiB, {s['requests']:,} requests), window hits {s['window_rows']:,} "
            f"({s['window_hit_ratio']:.1%}), queue depth {s['queue_depth']:.1f}, "
            f"{s['bandwidth'] / 2**20:.0f} MiB/s, read amplification {o.read_amplification:.2f}x; "
            f"peak memory {peak}, OOM kills {o.oom_kills}" + (f"; {o.message}" if o.state != "succeeded" else ""),
            flush=True,
        )
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    rate = {k: o.batches_per_second for k, o in outcomes.items() if o.state == "succeeded"}
    if "direct" in rate and "memory" in rate:
        r = rate["direct"] / rate["memory"]
        print(f"direct / memory: {r:.2f}x (target >= 0.5x: {'met' if r >= 0.5 else 'NOT met'})")
    if "direct" in rate and "mapped" in rate:
        r = rate["direct"] / rate["mapped"]
        print(f"direct / mapped: {r:.2f}x (target >= 3x: {'met' if r >= 3 else 'NOT met'})")
    if a.json:
        write_figures(
            str(a.json),
            "out_of_core_job",
            figures(outcomes, rate, round(load_after[0], 2)),
            runs={k: {**o.__dict__, "read_amplification": o.read_amplification} for k, o in outcomes.items()},
            dataset=dataset.name,
            limit_bytes=limit,
            host_bytes=host,
        )
    return 0


def host_budget(a: argparse.Namespace, spec: JobSpec, dataset: PreparedDataset, limit: int, structure: int) -> int:
    """The host tier's bytes: `--host-budget`, or the limit less the structure and `--reserve` (auto: the
    daemon's own memory, the job's fixed need as the daemon computes it and a little for the window)."""
    m = dataset.manifest
    feature_bytes = m.num_nodes * m.feature_row_bytes
    if a.host_budget != "auto":
        host = parse_budget(a.host_budget, total_bytes=feature_bytes, what="--host-budget")
    elif a.reserve != "auto":
        host = limit - structure - parse_budget(a.reserve, total_bytes=feature_bytes, what="--reserve")
    else:
        plan = PlacementPlan(
            num_nodes=m.num_nodes,
            row_bytes=m.feature_row_bytes,
            num_devices=0,
            replicated_end=0,
            interleaved_end=0,
            host_end=0,
        )
        direct = spec.model_copy(update={"storage_reads": "direct", "window": a.window})
        need = memory_need(direct, plan, limit=limit, held=DAEMON_BYTES + structure)
        host = limit - need.fixed - WINDOW_ALLOWANCE
    return max(0, host) // m.feature_row_bytes * m.feature_row_bytes


def figures(outcomes: dict[str, Outcome], rate: dict[str, float], load: float) -> list[dict[str, object]]:
    """The figures for `tests.bench.all`: the ratios against the same run's baselines, the direct
    run's read amplification, and a refusal's least limit."""
    out: list[dict[str, object]] = []
    for other, target in (("memory", 0.5), ("mapped", 3)):
        if "direct" in rate and other in rate:
            out.append(
                {
                    "name": f"direct + window / {other}, training batches/s",
                    "value": round(rate["direct"] / rate[other], 3),
                    "unit": "x",
                    "baseline": f"{other}: {rate[other]:.3f} batches/s",
                    "target": target,
                    "load_average": load,
                }
            )
    if "direct" in rate:
        out.append(
            {
                "name": "direct read amplification (device bytes / rows' bytes)",
                "value": round(outcomes["direct"].read_amplification, 3),
                "unit": "x",
                "target": 2,
                "better": "lower",
                "load_average": load,
            }
        )
    refused = outcomes.get("refused")
    if refused is not None:
        least = re.search(r"a memory limit of at least (\d+\.\d+) GiB", refused.message)
        out.append(
            {
                "name": f"job under too small a limit: {refused.state}; least limit named",
                "value": float(least[1]) if least else 0.0,
                "unit": "GiB",
                "load_average": load,
            }
        )
    return out


def verify_cost(a: argparse.Namespace, dataset: PreparedDataset, specs: dict) -> int:
    """Each run of --only on the dataset as prepared (rows checked) and without its checksums, interleaved."""
    unchecked = unchecked_copy(dataset, a.root)
    rates: dict[tuple[str, str], list[float]] = {}
    try:
        for round_ in range(a.rounds):
            for label in a.only.split(","):
                spec, limit_bytes = specs[label]
                pair = [("checked", dataset), ("unchecked", unchecked)]
                for variant, data in pair if round_ % 2 == 0 else pair[::-1]:  # neither always runs first
                    run_spec = spec.model_copy(update={"dataset": data.name})
                    if limit_bytes is None:
                        o = run_job(f"{label}-{variant}", data, run_spec, a.root, None)
                    else:
                        with MemoryLimit(f"graphtier-bench-{label}-{variant}", limit_bytes) as cgroup:
                            o = run_job(f"{label}-{variant}", data, run_spec, a.root, cgroup)
                    rates.setdefault((label, variant), []).append(o.batches_per_second if o.state == "succeeded" else 0)
                    print(
                        f"round {round_ + 1} {label:7s} {variant:9s} {o.state}: {o.batches} batches, "
                        f"{o.batches_per_second:.3f} batches/s training, storage rows gathered "
                        f"{o.storage_rows_gathered:,}",
                        flush=True,
                    )
    finally:
        shutil.rmtree(unchecked.directory, ignore_errors=True)
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    for label in a.only.split(","):
        checked, plain = statistics.median(rates[label, "checked"]), statistics.median(rates[label, "unchecked"])
        r = checked / plain if plain else 0.0
        print(
            f"{label}: checked {checked:.3f} / unchecked {plain:.3f} batches/s (medians of {a.rounds}) = {r:.2f}x "
            f"(target >= 0.9x: {'met' if r >= 0.9 else 'NOT met'})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
