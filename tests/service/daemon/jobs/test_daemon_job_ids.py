"""Job ids are numbers to people: messages and lists order them 2 before 10."""

from __future__ import annotations

import pytest

from graphtier.contract.errors import UnknownJobError
from graphtier.contract.jobs.state import job_id_order
from graphtier.service.daemon.jobs.table import JobRecord, JobTable


def test_unknown_job_names_the_latest_ids_in_numeric_order():
    table = JobTable()
    for job_id in ("1", "2", "9", "10", "11"):
        table.add(JobRecord(job_id=job_id, dataset="d", world_size=1))
    with pytest.raises(UnknownJobError, match=r"latest known: 1, 2, 9, 10, 11\)"):
        table.get("12")
    assert table.jobs_using("d") == ["1", "2", "9", "10", "11"]
    assert sorted(["10", "x", "9"], key=job_id_order) == ["9", "10", "x"]
