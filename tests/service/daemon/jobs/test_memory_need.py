"""A job's memory need under a limit: the least that works does, the storage buffers take only what is left."""

from __future__ import annotations

import re

from graphtier.contract.jobs.spec import JobSpec
from graphtier.service.daemon.jobs.memory_need import cgroup_memory_limit, memory_need, refusal
from graphtier.service.placement import PlacementPlan
from graphtier.service.storage.buffers import MIN_BUDGET_BYTES

GiB, MiB = 1 << 30, 1 << 20
PLAN = PlacementPlan(num_nodes=1 << 19, row_bytes=4096, num_devices=0, replicated_end=0, interleaved_end=0, host_end=0)
SPEC = JobSpec(dataset="d", fanouts=[10, 5], batch_size=512, window=4, storage_reads="direct", nproc_per_node=2)


def test_the_least_that_works_fits_and_a_little_less_does_not():
    held = 400 * MiB
    need = memory_need(SPEC, PLAN, limit=GiB, held=held)
    line = refusal(SPEC, PLAN, need, host_tier_bytes=0)
    assert not need.fits and re.search(r"the least that works: a memory limit of at least \d+\.\d\d GiB$", line)
    least = float(re.search(r"at least (\d+\.\d\d) GiB$", line)[1])  # 1 GiB holds no smaller batch, not one rank
    assert memory_need(SPEC, PLAN, limit=int(least * GiB) + 8 * MiB, held=held).fits
    assert not memory_need(SPEC, PLAN, limit=int(least * GiB) - 96 * MiB, held=held).fits
    need = memory_need(SPEC, PLAN, limit=2 * GiB, held=held)
    line = refusal(SPEC, PLAN, need, host_tier_bytes=0)
    found = re.search(r"or --batch-size (\d+) or --nproc-per-node (\d+)$", line)
    assert not need.fits and found, line
    batch, ranks = int(found[1]), int(found[2])

    def fits(**change: object) -> bool:
        return memory_need(SPEC.model_copy(update=change), PLAN, limit=2 * GiB, held=held).fits

    assert fits(batch_size=batch) and not fits(batch_size=batch + 1)
    assert fits(nproc_per_node=ranks) and not fits(nproc_per_node=ranks + 1)


def test_storage_buffers_get_what_the_limit_leaves_up_to_a_full_window():
    tight = memory_need(SPEC, PLAN, limit=3 * GiB, held=400 * MiB)
    assert tight.fits and MIN_BUDGET_BYTES < tight.storage_budget < tight.full_storage
    assert tight.fixed - tight.ranks * MIN_BUDGET_BYTES + tight.ranks * tight.storage_budget <= tight.limit
    roomy = memory_need(SPEC, PLAN, limit=64 * GiB, held=400 * MiB)
    assert roomy.storage_budget == roomy.full_storage
    in_memory = PLAN.model_copy(update={"host_end": PLAN.num_nodes})
    assert memory_need(SPEC, in_memory, limit=3 * GiB, held=0).full_storage == 0  # no storage rows to read


def test_the_cgroup_limit_is_the_tightest_of_the_process_cgroup_and_its_ancestors(tmp_path):
    v1 = tmp_path / "memory"
    (v1 / "outer" / "inner").mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # the root: no limit
    (v1 / "outer" / "memory.limit_in_bytes").write_text(f"{2 * GiB}\n")
    (v1 / "outer" / "inner" / "memory.limit_in_bytes").write_text(f"{3 * GiB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu:/\n4:memory:/outer/inner\n0::/\n")
    assert cgroup_memory_limit(proc, tmp_path) == 2 * GiB
    proc.write_text("4:memory:/\n")
    assert cgroup_memory_limit(proc, tmp_path) is None
    v2 = tmp_path / "v2"
    (v2 / "job").mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "job" / "memory.max").write_text(f"{GiB}\n")
    proc.write_text("0::/job\n")
    assert cgroup_memory_limit(proc, v2) == GiB
    (v2 / "job" / "memory.max").write_text("max\n")
    assert cgroup_memory_limit(proc, v2) is None
