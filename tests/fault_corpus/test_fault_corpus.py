"""Every row of the fault corpus (`fault_cases.CASES`): refused (or handled) naming the thing, no
traceback, no hang (each case has a deadline in time units, conftest.py), no data lost, no leaks.
The counts are printed at the end of the run ("fault corpus")."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fault_cases import CASES, Case, Covered
from fault_checks import VERDICTS, Snapshot, dataset_verifies, judge

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in CASES if isinstance(r, Case)])
def test_case(row: Case, corpus, tmp_path):
    corpus.work = tmp_path
    before = Snapshot.take(corpus.root, (corpus.daemon.pid,))
    budget = corpus.begin(row.deadline_units)
    outcome = row.run(corpus)
    overran = time.monotonic() - corpus.deadline
    verdict = judge(
        row.id,
        outcome,
        row.names,
        expect_exit=row.expect_exit,
        lost=dataset_verifies(corpus.root, "good"),
        leaks=before.leaks(corpus.root),
        handled=row.handled,
        overran_s=overran if overran > 0 else 0.0,
    )
    VERDICTS[row.id] = verdict
    assert verdict.ok, (
        f"{row.id} ({row.what}, deadline {budget:.0f} s): {verdict}\n--- output ---\n{outcome.output[-3000:]}\n"
        f"--- log ---\n{outcome.log[-3000:]}"
    )


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in CASES if isinstance(r, Covered)])
def test_covered_case_names_a_test_that_exists(row: Covered):
    """The row's test is where it says (its verdict is that test's outcome in the same run)."""
    path, _, name = row.test.partition("::")
    assert (REPO / path).is_file(), f"{row.id}: {path} does not exist"
    assert f"def {name}(" in (REPO / path).read_text(), f"{row.id}: {path} has no test {name}"


def test_case_ids_are_unique():
    ids = [row.id for row in CASES]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})


def test_no_case_is_left_out_of_the_default_run():
    """Every row runs where the suite runs by default (`-m "not slow and not long"`): a test a row names marked
    slow or long would print "not run" in the table of every default run (a `Case` has no such mark)."""
    slow = []
    for row in CASES:
        if isinstance(row, Covered):
            path, _, name = row.test.partition("::")
            source = (REPO / path).read_text()
            head = source[: source.index(f"def {name}(")].rsplit("\n\n", 1)[-1]
            marked = ("pytest.mark.slow", "pytest.mark.long")  # out of the default run, where the corpus runs
            if any(mark in head or f"pytestmark = {mark}" in source for mark in marked):
                slow.append(row.id)
    assert not slow, f"rows not run by default: {slow}"
