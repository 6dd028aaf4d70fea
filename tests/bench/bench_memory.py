"""Memory of 4 ranks on one machine: do daemon + producers + ranks hold one copy of the features?

Through the product: `graphtier cluster start` (temporary runtime dir), the dataset loaded into
the daemon's shm tiers, a 4-rank GraphSAGE job (fanout 15,10,5, batch 1024/rank, hidden 256,
2 slots) submitted over gRPC, `graphtier cluster stop` in `finally`, then a leak check. Every
~0.5 s the daemon's process tree (daemon, producers, torchrun agent, ranks) is read with psutil:
RSS, PSS, USS, and from smaps the PSS of graphtier segments and of mapped `.npy` files. Total
resident = PSS outside the segments + bytes allocated in /dev/shm by the tree's segments: each
page once, including allocated pages nobody has touched. The sum of RSS is printed beside it
(a shared page counted once per process: "many copies" where there is one).

The bound: 1.15 x (feature + structure bytes) + 4 x per-rank footprint, the footprint being a
rank's USS (model, grads, Adam state, activations, its heap); the pure parameter + grad + Adam
bytes are printed for reference. Issue 27's target: the peak total at most 1.10 x that bound.
The job spec has no step cap, so `--max-steps N` cancels the job after N steps (default 0: the
whole epoch, then evaluation; 1-2.5 minutes at full size on 2 cores).

Run: python tests/bench/bench_memory.py [--dataset-root DIR] [--max-steps N] [--quick] [--json FILE]
(`--quick`: R-MAT scale 14 and a tiny job, its whole epoch, under 90 s.)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import torch
from machine import bench_cache, cpu_model, write_figures

from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.client.data_plane import DataPlaneClient
from graphtier.launcher.runtime.models.factory import build_model
from graphtier.service.prepared import PreparedDataset
from graphtier.service.shm.naming import PREFIX, SHM_DIR, SegmentName

REPO_ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
TARGET_RATIO = 1.10  # issue 27: peak total resident at most 1.10 x the bound
ROLES = ("daemon", "forkserver", "producer", "torchrun agent", "rank", "other")
SHM_PREFIX = f"{SHM_DIR}/{PREFIX}"
GRAPHTIER = [sys.executable, "-m", "graphtier.launcher.cli"]


def role_of(proc: psutil.Process, daemon_pid: int) -> str:
    if proc.pid == daemon_pid:
        return "daemon"
    cmdline = " ".join(proc.cmdline())
    if "multiprocessing.forkserver" in cmdline:  # producers and agents are forked from it and keep its cmdline
        if proc.ppid() == daemon_pid:
            return "forkserver"
        try:
            ranks = any("rank_main" in " ".join(child.cmdline()) for child in proc.children())
        except psutil.Error:
            ranks = False
        return "torchrun agent" if ranks else "producer"
    if "graphtier.launcher.rank_main" in cmdline:
        return "rank"
    return "other"


@dataclass(frozen=True)
class ProcMemory:
    pid: int
    role: str
    rss: int
    pss: int
    uss: int
    shm_pss: int  # PSS of its mappings of graphtier segments: the shared data, counted once over all
    npy_pss: int  # PSS of mapped prepared-dataset files (*.npy): page cache, a second copy of the data


@dataclass
class Snapshot:
    """One reading of the whole tree and of the segments its processes own in /dev/shm."""

    at_s: float
    procs: list[ProcMemory]
    shm_bytes: dict[str, int]  # owner role -> bytes allocated in /dev/shm

    def total(self, what: str) -> int:
        return sum(getattr(p, what) for p in self.procs)

    def resident(self) -> int:
        """Each page once: PSS outside the segments + the segments' allocated (fallocate'd) bytes."""
        return self.total("pss") - self.total("shm_pss") + sum(self.shm_bytes.values())


@dataclass
class PhasePeaks:
    """Peaks of one phase (loading the dataset, running the job)."""

    peak: Snapshot | None = None
    pss_total: int = 0
    rss_total: int = 0
    shm_by_role: dict[str, int] = field(default_factory=dict)
    rank_uss: dict[int, int] = field(default_factory=dict)
    samples: int = 0

    def add(self, snap: Snapshot) -> None:
        self.samples += 1
        if self.peak is None or snap.resident() > self.peak.resident():
            self.peak = snap
        self.pss_total = max(self.pss_total, snap.total("pss"))
        self.rss_total = max(self.rss_total, snap.total("rss"))
        for role, allocated in snap.shm_bytes.items():
            self.shm_by_role[role] = max(self.shm_by_role.get(role, 0), allocated)
        for p in snap.procs:
            if p.role == "rank":
                self.rank_uss[p.pid] = max(self.rank_uss.get(p.pid, 0), p.uss)


class TreeSampler(threading.Thread):
    """Reads the daemon's process tree every `interval_s` until stopped; keeps peaks per phase."""

    def __init__(self, daemon_pid: int, interval_s: float = 0.5) -> None:
        super().__init__(name="memory-sampler", daemon=True)
        self.daemon_pid, self.interval_s = daemon_pid, interval_s
        self.phase = "start"
        self.peaks: dict[str, PhasePeaks] = {}
        self.seen: dict[int, tuple[float, str]] = {}  # pid -> (create_time, role), for the leak check
        self.segments_seen: set[str] = set()
        self._stop_event = threading.Event()
        self._t0 = time.monotonic()

    def snapshot(self) -> Snapshot:
        try:
            root = psutil.Process(self.daemon_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        procs, roles = [], {}
        for proc in tree:
            try:
                role = role_of(proc, self.daemon_pid)
                info = proc.memory_full_info()
                maps = proc.memory_maps(grouped=True)
                shm_pss = sum(m.pss for m in maps if m.path.startswith(SHM_PREFIX))
                npy_pss = sum(m.pss for m in maps if m.path.endswith(".npy"))
                self.seen.setdefault(proc.pid, (proc.create_time(), role))
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # ended between listing and reading
            roles[proc.pid] = role
            procs.append(ProcMemory(proc.pid, role, info.rss, info.pss, info.uss, shm_pss, npy_pss))
        shm: dict[str, int] = {}
        for entry in os.scandir(SHM_DIR):
            name = SegmentName.parse(entry.name)
            if name is None or name.pid not in roles:
                continue
            try:
                allocated = entry.stat().st_blocks * 512
            except FileNotFoundError:
                continue
            self.segments_seen.add(entry.name)
            shm[roles[name.pid]] = shm.get(roles[name.pid], 0) + allocated
        return Snapshot(time.monotonic() - self._t0, procs, shm)

    def run(self) -> None:
        while not self._stop_event.is_set():
            snap = self.snapshot()
            self.peaks.setdefault(self.phase, PhasePeaks()).add(snap)
            if self.phase == "job" and any(p.role == "rank" for p in snap.procs):
                # while producers live the ranks train on their slots; after, they evaluate alone
                stage = "training" if any(p.role == "producer" for p in snap.procs) else "evaluation"
                self.peaks.setdefault(stage, PhasePeaks()).add(snap)
            self._stop_event.wait(self.interval_s)

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:  # started
            self.join(30)


def ensure_dataset(root: Path, scale: int, feature_dim: int) -> PreparedDataset:
    """The prepared R-MAT dataset `rmat<scale>` under `root`, prepared here when there is none."""
    name = f"rmat{scale}"
    if (root / name).exists():
        dataset = PreparedDataset.open(name, root)  # PreparedDatasetError names the file and the problem
        m = dataset.manifest
        if m.num_nodes != 1 << scale or m.feature_dim != feature_dim or not m.undirected:
            raise GraphtierError(
                f"{root / name} is not undirected R-MAT scale {scale} with {feature_dim} features "
                f"(N={m.num_nodes:,}, {m.feature_dim} features); pass another --dataset-root"
            )
        return dataset
    command = [
        *GRAPHTIER,
        "dataset",
        "prepare",
        "synthetic:rmat",
        "--scale",
        str(scale),
        "--feature-dim",
        str(feature_dim),
        "--undirected",
        "--out",
        str(root),
        "--name",
        name,
    ]
    print("preparing:", " ".join(command), flush=True)
    if subprocess.run(command).returncode != 0:
        raise GraphtierError(f"preparing {root / name} failed (command above)")
    return PreparedDataset.open(name, root)


def start_daemon(runtime_dir: Path, dataset_root: Path) -> int:
    """`graphtier cluster start`; the daemon's pid."""
    command = [
        *GRAPHTIER,
        "cluster",
        "start",
        "--runtime-dir",
        str(runtime_dir),
        "--dataset-root",
        str(dataset_root),
        "--http-port",
        "0",
        "--json",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise GraphtierError(f"`graphtier cluster start --runtime-dir {runtime_dir}` failed:\n{done.stderr.strip()}")
    return int(json.loads(done.stdout)["pid"])


def run_job(client: DataPlaneClient, spec: JobSpec, max_steps: int) -> tuple[str, int, float]:
    """Submit, wait until the job ends or has trained `max_steps` steps (then cancel); (state, steps, seconds)."""
    t0 = time.monotonic()
    job = client.submit_job(spec)
    while not job.state.final:
        time.sleep(0.5)
        job = client.get_job(job.job_id)
        step = job.progress.global_step if job.progress else 0
        if max_steps and step >= max_steps and not job.state.final:
            job = client.cancel_job(job.job_id, f"bench_memory: step cap {max_steps} reached")
    steps = job.progress.global_step if job.progress else 0
    if job.state.value not in ("succeeded", "cancelled") or steps == 0:
        raise GraphtierError(
            f"job {job.job_id} ended {job.state.value} after {steps} steps: {job.message}; log {job.log_path}"
        )
    return job.state.value, steps, time.monotonic() - t0


def _alive(pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def leftovers(sampler: TreeSampler, grace_s: float = 10.0) -> tuple[list[str], list[str], list[str], int]:
    """After the stop: processes that outlived the daemon, those still alive after `grace_s`, our
    segments still in /dev/shm, and how many graphtier segments belong to processes not ours."""
    lingering = [f"{role} {pid}" for pid, (created, role) in sampler.seen.items() if _alive(pid, created)]
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(pid, c) for pid, (c, _) in sampler.seen.items()):
        time.sleep(0.1)
    alive = [f"{role} {pid}" for pid, (created, role) in sampler.seen.items() if _alive(pid, created)]
    ours, others = [], 0
    for entry in os.listdir(SHM_DIR):
        name = SegmentName.parse(entry)
        if entry in sampler.segments_seen or (name is not None and name.pid in sampler.seen):
            ours.append(entry)
        elif entry.startswith(PREFIX):
            others += 1
    return lingering, alive, ours, others


def model_state_bytes(spec: JobSpec, in_dim: int, num_classes: int) -> int:
    """Parameters + gradients + Adam's two moments, in bytes."""
    model = build_model(spec.model, in_dim, spec.hidden, num_classes, len(spec.fanouts), spec.dropout, spec.heads)
    return 4 * sum(p.numel() * p.element_size() for p in model.parameters())


def _columns(procs: list[ProcMemory], shm_bytes: int) -> list[int]:
    return [
        sum(p.rss for p in procs),
        sum(p.pss for p in procs),
        sum(p.uss for p in procs),
        sum(p.shm_pss for p in procs),
        sum(p.npy_pss for p in procs),
        sum(p.pss - p.shm_pss for p in procs),
        shm_bytes,
    ]


def report(
    args: argparse.Namespace,
    dataset: PreparedDataset,
    spec: JobSpec,
    sampler: TreeSampler,
    outcome: tuple[str, int, float],
    load_s: float,
) -> list[dict[str, object]]:
    """Print the machine, the run, the table at the peak and the verdict; return the figures."""
    m = dataset.manifest
    feature_bytes = m.num_nodes * m.feature_row_bytes
    structure_bytes = m.arrays["colptr"].nbytes + m.arrays["row"].nbytes
    job = sampler.peaks["job"]
    peak = job.peak
    if peak is None:
        raise GraphtierError("the memory sampler took no sample while the job ran")
    mem = psutil.virtual_memory()
    print(
        f"machine: {cpu_model()} ({os.cpu_count()} logical cpus, {mem.total / 2**30:.1f} GiB), "
        f"{platform.system()} {platform.release()}; python {platform.python_version()}, torch {torch.__version__}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"dataset: {m.name}, N={m.num_nodes:,}, E={m.num_edges:,}, {m.feature_dim} float32 features; "
        f"loaded into the daemon's shm in {load_s:.1f} s"
    )
    state, steps, seconds = outcome
    cap = f"step cap {args.max_steps}" if args.max_steps else "no step cap"
    print(
        f"job: {spec.model} {len(spec.fanouts)} layers hidden {spec.hidden}, fanout "
        f"{','.join(map(str, spec.fanouts))}, batch {spec.batch_size}/rank, {spec.nproc_per_node} ranks, "
        f"{spec.num_slots} slots, 1 epoch ({cap}); {state} after {steps} steps in {seconds:.0f} s; "
        f"{job.samples} samples every {args.interval:g} s"
    )
    print()
    heads = ("RSS", "PSS", "USS", "shm PSS", "npy PSS", "rest PSS", "shm alloc")
    print(f"{f'MiB at the peak (t={peak.at_s:.0f} s)':32s} procs " + " ".join(f"{h:>9s}" for h in heads))
    for role in ROLES:
        procs = [p for p in peak.procs if p.role == role]
        if procs or role != "other":
            row = _columns(procs, peak.shm_bytes.get(role, 0))
            print(f"{role:32s} {len(procs):5d} " + " ".join(f"{v / MIB:9.1f}" for v in row))
    row = _columns(peak.procs, sum(peak.shm_bytes.values()))
    print(f"{'total':32s} {len(peak.procs):5d} " + " ".join(f"{v / MIB:9.1f}" for v in row))
    print(
        "shm PSS: mapped pages of graphtier segments; npy PSS: mapped pages of the prepared .npy files (page "
        "cache); rest PSS: all but shm (npy included); shm alloc: bytes in /dev/shm of the segments each owns"
    )
    print()
    footprints = sorted(job.rank_uss.values(), reverse=True)[: spec.nproc_per_node]
    per_rank = sum(footprints) / max(1, len(footprints))
    data_bytes = feature_bytes + structure_bytes
    target = 1.15 * data_bytes + spec.nproc_per_node * per_rank
    service = [p for p in peak.procs if p.role != "rank"]
    load = sampler.peaks.get("load")
    lines = [
        ("feature bytes", feature_bytes),
        ("structure bytes (colptr + row)", structure_bytes),
        ("/dev/shm of the daemon (dataset: + labels, split ids)", job.shm_by_role.get("daemon", 0)),
        ("/dev/shm of the producers (ping-pong slots), peak", job.shm_by_role.get("producer", 0)),
        ("per-rank footprint: USS, mean of the ranks' peaks", per_rank),
        ("  for reference: model params + grads + Adam state", model_state_bytes(spec, m.feature_dim, m.num_classes)),
        ("daemon + producers + agent outside shm (rest PSS)", sum(p.pss - p.shm_pss for p in service)),
        ("peak sum of RSS (a shared page once per process)", job.rss_total),
        ("peak sum of PSS (misses segment pages nobody maps)", job.pss_total),
        ("peak total resident (rest PSS + /dev/shm alloc)", peak.resident()),
        ("  of which mapped .npy files (a second copy, page cache)", peak.total("npy_pss")),
        (f"target 1.15 x (features + structure) + {spec.nproc_per_node} x footprint", target),
    ]
    if load is not None and load.peak is not None:
        lines.insert(-3, ("peak total resident while loading the dataset", load.peak.resident()))
    for label, value in lines:
        print(f"{label:56s} {value / MIB:10.1f} MiB")
    print("rank footprints (USS peaks): " + ", ".join(f"{v / MIB:.1f} MiB" for v in footprints))
    total = peak.resident()
    ok = total <= target
    copies = job.shm_by_role.get("daemon", 0) / data_bytes
    print(
        f"verdict: peak total resident {total / MIB:.1f} MiB {'<=' if ok else '>'} target {target / MIB:.1f} MiB "
        f"({total / target:.3f} x): {'met' if ok else 'NOT met'}; features + structure in shm "
        f"{copies:.2f} x their bytes (one copy); the sum of RSS says {job.rss_total / MIB:.1f} MiB "
        f"({job.rss_total / max(1, total):.2f} x)"
    )
    # A rank that loaded its own batches would hold the one it trains on in its USS; here that batch is a
    # slot in shm, outside the rank's USS. The same bound with that slot counted as part of each rank:
    slot = job.shm_by_role.get("producer", 0) / max(1, spec.nproc_per_node * spec.num_slots)
    with_input = target + spec.nproc_per_node * slot
    print(
        f"the same with each rank's held slot (its input batch, {slot / MIB:.1f} MiB) in its footprint: target "
        f"{with_input / MIB:.1f} MiB ({total / with_input:.3f} x): {'met' if total <= with_input else 'NOT met'}"
    )
    ratio = total / target
    verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
    print(f"peak total resident: {ratio:.3f} x the bound (target <= {TARGET_RATIO}: {verdict})")
    # The bound above takes each rank's peak over the whole run, evaluation included, while the total
    # peaks when producers' slots and the ranks' training both live: each stage against its own ranks.
    stages: dict[str, tuple[float, float]] = {}
    for stage in ("training", "evaluation"):
        peaks = sampler.peaks.get(stage)
        if peaks is None or peaks.peak is None or not peaks.rank_uss:
            continue
        ranks = sorted(peaks.rank_uss.values(), reverse=True)[: spec.nproc_per_node]
        stage_target = 1.15 * data_bytes + spec.nproc_per_node * sum(ranks) / len(ranks)
        stages[stage] = (peaks.peak.resident(), stage_target)
        print(
            f"{stage:10s}: peak total resident {peaks.peak.resident() / MIB:.1f} MiB, rank USS peaks "
            + ", ".join(f"{v / MIB:.0f}" for v in ranks)
            + f" MiB; bound {stage_target / MIB:.1f} MiB ({peaks.peak.resident() / stage_target:.3f} x)"
        )
    bound = f"1.15 x data + {spec.nproc_per_node} x rank USS ({target / MIB:.0f} MiB)"
    what = f"R-MAT {m.num_nodes:,} nodes, {spec.nproc_per_node} ranks, {args.steps_label}"
    per_stage = [
        {
            "name": f"{stage}: peak total resident over its bound (its ranks' USS peaks)",
            "value": round(peak_bytes / stage_target, 3),
            "unit": "x",
            "better": "lower",
            "baseline": f"1.15 x data + {spec.nproc_per_node} x rank USS in {stage} ({stage_target / MIB:.0f} MiB)",
            "target": TARGET_RATIO if args.scale >= 20 else None,
        }
        for stage, (peak_bytes, stage_target) in stages.items()
    ]
    return [
        {
            "name": f"peak total resident over the bound, {what}",
            "value": round(ratio, 3),
            "unit": "x",
            "better": "lower",
            "baseline": bound,
            # the target is for the full-size run: at --quick's scale the daemon's, producers' and
            # agent's own interpreters (a fixed few hundred MiB) outweigh the 10 MiB of data
            "target": TARGET_RATIO if args.scale >= 20 else None,
        },
        {
            "name": "peak total resident (rest PSS + /dev/shm allocated)",
            "value": round(total / MIB, 1),
            "unit": "MiB",
            "better": "lower",
            "baseline": bound,
            "target": None,
        },
        *per_stage,
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--dataset-root",
        type=Path,
        default=bench_cache("prepared"),
        help="prepared datasets (rmat20 / rmat14 are prepared here when missing)",
    )
    p.add_argument("--scale", type=int, default=20)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=0, help="cancel the job after this many steps (0 = whole epoch)")
    p.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    p.add_argument("--quick", action="store_true", help="R-MAT scale 14, fanout 5,5, batch 128, hidden 32")
    p.add_argument("--json", help="also write the figures as JSON here")
    args = p.parse_args()
    if args.quick:
        args.scale, args.fanouts, args.batch_size, args.hidden = 14, "5,5", 128, 32
    args.steps_label = f"first {args.max_steps} steps" if args.max_steps else "whole epoch"
    dataset = ensure_dataset(args.dataset_root, args.scale, 128)
    try:
        fanouts = [int(k) for k in args.fanouts.split(",")]
    except ValueError:
        p.error(f"--fanouts {args.fanouts!r}: give integers separated by commas, e.g. 15,10,5")
    spec = JobSpec.build(
        {
            "dataset": dataset.name,
            "model": "sage",
            "fanouts": fanouts,
            "batch_size": args.batch_size,
            "hidden": args.hidden,
            "epochs": 1,
            "nproc_per_node": args.ranks,
            "num_slots": 2,
            "name": "bench_memory",
        },
        source="bench_memory",
    )
    runtime_dir = Path(tempfile.mkdtemp(prefix="gt-benchmem-"))
    sampler = TreeSampler(start_daemon(runtime_dir, args.dataset_root), args.interval)
    try:
        sampler.start()
        with DataPlaneClient(runtime_dir=runtime_dir) as client:
            sampler.phase = "load"
            t0 = time.monotonic()
            client.load_dataset(dataset.name)
            load_s = time.monotonic() - t0
            sampler.phase = "job"
            outcome = run_job(client, spec, args.max_steps)
    finally:
        sampler.stop()
        subprocess.run([*GRAPHTIER, "cluster", "stop", "--runtime-dir", str(runtime_dir)], check=False)
    figures = report(args, dataset, spec, sampler, outcome, load_s)
    lingering, alive, ours, others = leftovers(sampler)
    note = f" ({others} graphtier segments of processes not in this tree)" if others else ""
    late = f" (outlived `cluster stop`, gone within 10 s: {', '.join(lingering)})" if lingering else ""
    print(
        f"after `graphtier cluster stop`: {len(alive)} processes of the tree alive {alive or ''}{late}, "
        f"{len(ours)} of its segments left in {SHM_DIR} {ours or ''}{note}"
    )
    shutil.rmtree(runtime_dir, ignore_errors=True)
    command = "python tests/bench/bench_memory.py"
    write_figures(args.json, "4-rank memory", figures, command=command, leaked=bool(alive or ours))
    if alive or ours:
        print("LEAK: the daemon left processes or shared memory behind", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GraphtierError as exc:  # bad flags, a daemon that cannot start, a failed job: one clear message
        print(f"bench_memory: {exc}", file=sys.stderr)
        sys.exit(1)
