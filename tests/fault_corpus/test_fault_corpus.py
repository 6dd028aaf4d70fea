"""Every row of the fault corpus (`fault_cases.CASES`): refused naming the thing, no traceback,
no data lost, no leaks. The counts are printed at the end of the run ("fault corpus")."""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_cases import CASES, Case, Covered
from fault_checks import VERDICTS, Snapshot, dataset_verifies, judge

REPO = Path(__file__).resolve().parents[2]


def _param(row: Case | Covered):
    marks = [pytest.mark.slow] if isinstance(row, Case) and row.slow else []
    return pytest.param(row, id=row.id, marks=marks)


@pytest.mark.parametrize("row", [_param(r) for r in CASES if isinstance(r, Case)])
def test_case(row: Case, corpus, tmp_path):
    corpus.work = tmp_path
    before = Snapshot.take(corpus.root, (corpus.daemon.pid,))
    outcome = row.run(corpus)
    verdict = judge(
        row.id,
        outcome,
        row.names,
        expect_exit=row.expect_exit,
        lost=dataset_verifies(corpus.root, "good"),
        leaks=before.leaks(corpus.root),
    )
    VERDICTS[row.id] = verdict
    assert verdict.ok, (
        f"{row.id} ({row.what}): {verdict}\n--- output ---\n{outcome.output[-3000:]}\n"
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
