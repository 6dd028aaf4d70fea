"""A job's memory need under the daemon's memory limit, and what its producers' storage buffers get.

Under a limit (the memory cgroup the daemon runs in, or `--memory-limit`) everything the daemon
starts is charged to it: the daemon itself, the datasets' shared memory, each job's torchrun
agent, its ranks and producers, their ping-pong slots, and the producers' storage buffers.
Going over it kills a process, so a job is refused at submit when its *fixed* need does not
fit: what the daemon holds now (its own memory and every loaded dataset's shared memory),
plus per job the agent, and per rank a rank process, a producer, its slots at the batch's
upper bound (`capacity.upper_bound`) and the least storage buffers
(`graphtier.service.storage.buffers.MIN_BUDGET_BYTES`), plus a share of the limit kept free.
What the limit leaves beyond that goes to the producers' storage buffers (the staging buffer
and the look-ahead window's row cache), up to what a full window can use: the storage path
is sized from the limit, so it is never the reason a process is killed.

The refusal names the limit, the need and the least that works: the smallest limit, and where
they exist the largest batch size, number of ranks and host tier that fit under this one.

The per-process figures below are the unique set sizes at their peak of a 1-rank GraphSAGE job's
processes (the rank, and the torchrun agent and producer forked from the warm forkserver, with
their buffers), rounded up.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.pipeline.capacity import upper_bound
from graphtier.service.placement import PlacementPlan
from graphtier.service.storage.buffers import MAX_STAGING_BYTES, MIN_BUDGET_BYTES

MiB = 1 << 20
AGENT_BYTES = 128 * MiB  # a job's torchrun agent
RANK_BYTES = 480 * MiB  # a CPU rank: interpreter, torch, model, optimizer and loader
PRODUCER_BYTES = 128 * MiB  # a producer, apart from its slots and storage buffers
SLOT_NODE_BYTES = 64  # per sampled node in a slot beside its feature row: ids, label, structure
KEEP_FREE_SHARE = 0.05  # of the limit: allocator slack, the code's page cache
UNLIMITED_CGROUP = 1 << 62  # cgroup v1 writes "no limit" as a number near 2^63
CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_memory_limit(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """The tightest memory limit over this process's cgroup and its ancestors (v2 `memory.max`, v1
    `memory.limit_in_bytes`); None when there is none or no memory cgroup is mounted."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[int] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and (root / "cgroup.controllers").exists():
            base, knob = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, knob = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        here = base / path.lstrip("/")
        while True:
            try:
                text = (here / knob).read_text().strip()
            except OSError:
                text = ""
            if text.isdigit() and int(text) < UNLIMITED_CGROUP:
                found.append(int(text))
            if here == base or base not in here.parents:
                break
            here = here.parent
    return min(found) if found else None


def daemon_held_bytes() -> int:
    """The daemon's own memory now: its private and file-backed resident pages (its shared memory,
    the datasets, is counted from their segments)."""
    values = {}
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile"):
                values[key] = int(rest.split()[0]) * 1024
    except OSError:
        return 0
    return sum(values.values())


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


@dataclass(frozen=True)
class MemoryNeed:
    """One job's memory under a limit (bytes); see the module docstring."""

    limit: int
    held: int  # the daemon and the loaded datasets, now
    agent: int
    ranks: int  # this node's
    per_rank: int  # rank process, producer, slots, least storage buffers
    keep_free: int
    full_storage: int  # per producer: what a full window and staging could use (0: no storage reads)

    @property
    def fixed(self) -> int:
        """The least the job runs in, the daemon's holdings included."""
        return self.held + self.agent + self.ranks * self.per_rank + self.keep_free

    @property
    def fits(self) -> bool:
        return self.fixed <= self.limit

    @property
    def storage_budget(self) -> int:
        """Bytes each producer's storage buffers get: the least plus its share of what the limit leaves,
        up to what a full window could use."""
        spare = max(0, self.limit - self.fixed) // max(1, self.ranks)
        return min(max(self.full_storage, MIN_BUDGET_BYTES), MIN_BUDGET_BYTES + spare)

    @property
    def job_bytes(self) -> int:
        """What the job itself adds to the daemon's holdings, its storage buffers as budgeted."""
        return self.agent + self.ranks * (self.per_rank - MIN_BUDGET_BYTES + self.storage_budget)


INFERENCE_CHUNK_FANIN = 64  # sources per destination a chunk of layer-wise inference is sized for (mean in-degree)


def inference_need(spec: JobSpec, plan: PlacementPlan, *, limit: int, held: int) -> MemoryNeed:
    """An inference job's need (`from_job`): no producers or slots; per rank its process and a chunk's
    rows (its sources' input, the layer's output, the aggregation between: `batch_size` destinations
    with `INFERENCE_CHUNK_FANIN` sources each, at most every node), and the job's layer rows -- the
    previous and the current layer, `hidden` float32 columns per node, in files every rank maps."""
    width = max(plan.row_bytes, spec.hidden * 4)
    sources = min(plan.num_nodes, spec.batch_size * INFERENCE_CHUNK_FANIN)
    layer_rows = 2 * plan.num_nodes * spec.hidden * 4
    return MemoryNeed(
        limit=limit,
        held=held,
        agent=AGENT_BYTES + layer_rows,
        ranks=spec.nproc_per_node,
        per_rank=RANK_BYTES + 3 * sources * width,
        keep_free=int(limit * KEEP_FREE_SHARE),
        full_storage=0,
    )


def memory_need(spec: JobSpec, plan: PlacementPlan, *, limit: int, held: int) -> MemoryNeed:
    """The need of `spec` on a dataset placed by `plan`, under `limit`, the daemon holding `held` now."""
    if spec.infers:
        return inference_need(spec, plan, limit=limit, held=held)
    nodes = upper_bound(
        batch_size=spec.batch_size, fanouts=spec.fanouts, num_nodes=plan.num_nodes, num_edges=1 << 62
    ).nodes
    slot = nodes * (plan.row_bytes + SLOT_NODE_BYTES) if spec.device == "cpu" else 0  # cuda: slots on the GPU
    storage_rows = plan.num_nodes - plan.host_end
    reads_storage = storage_rows > 0 and (spec.storage_reads != "mmap" or spec.window > 0)
    full = 0
    if reads_storage:  # the window's batches' storage rows, and the staging buffer
        full = (spec.window + 1) * min(nodes, storage_rows) * plan.row_bytes + MAX_STAGING_BYTES
    return MemoryNeed(
        limit=limit,
        held=held,
        agent=AGENT_BYTES,
        ranks=spec.nproc_per_node,
        per_rank=RANK_BYTES + PRODUCER_BYTES + spec.num_slots * slot + (MIN_BUDGET_BYTES if reads_storage else 0),
        keep_free=int(limit * KEEP_FREE_SHARE),
        full_storage=full,
    )


def refusal(spec: JobSpec, plan: PlacementPlan, need: MemoryNeed, *, host_tier_bytes: int) -> str:
    """One line: the limit, the need and the least that works (a limit; a batch size and a host tier
    that fit under this limit, where there are)."""
    least = math.ceil((need.fixed - need.keep_free) / (1 - KEEP_FREE_SHARE))  # its own share kept free too
    least = -(-least // (64 * MiB)) * 64 * MiB
    ways = [f"a memory limit of at least {_gib(least)}"]
    batch = _largest(spec, plan, need, "batch_size")
    if batch:
        ways.append(f"--batch-size {batch}")
    ranks = _largest(spec, plan, need, "nproc_per_node")
    if ranks:
        ways.append(f"--nproc-per-node {ranks}")
    over = need.fixed - need.limit
    if 0 < over < host_tier_bytes:
        ways.append(f"a host tier of at most {_gib(host_tier_bytes - over)} (--host-budget)")
    per_rank = need.per_rank + need.agent // max(1, need.ranks)
    return (
        f"job needs at least {_gib(need.fixed)} of memory but the daemon's limit is {_gib(need.limit)} "
        f"(the daemon and its datasets hold {_gib(need.held)}, each of {need.ranks} rank(s) with its producer and "
        f"slots ~{_gib(per_rank)}); the least that works: {' or '.join(ways)}"
    )


def _largest(spec: JobSpec, plan: PlacementPlan, need: MemoryNeed, field: str) -> int:
    """The largest value of `field` (batch_size or nproc_per_node) below the spec's whose need fits the
    limit, the rest of the spec as it is; 0 when none does."""
    lo, hi = 0, getattr(spec, field) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory_need(spec.model_copy(update={field: mid}), plan, limit=need.limit, held=need.held).fits:
            lo = mid
        else:
            hi = mid - 1
    return lo


def parse_memory_limit(text: str) -> int | None:
    """The limit meant by the daemon's `--memory-limit`: `auto` (its cgroup's, if any), `none`, or a size."""
    from graphtier.service.placement.tier_budget import parse_budget

    word = text.strip().lower()
    if word == "auto":
        return cgroup_memory_limit()
    if word in ("none", "off", "unlimited"):
        return None
    return parse_budget(
        text, total_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), what="--memory-limit"
    )
