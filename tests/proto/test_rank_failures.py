"""A rank's failure record (`contract/jobs/rank_failures.py`): the first record of a rank and attempt stands,
and the daemon names the earliest of the last attempt."""

from __future__ import annotations

import os

from graphtier.contract.jobs.rank_failures import first_rank_failure, write_rank_failure


def test_the_first_record_of_a_rank_stands_and_the_earliest_rank_is_the_cause(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    cause = write_rank_failure(tmp_path, 1, ValueError("lr 0.01 is too high at step 3"))
    os.utime(cause, ns=(1_000, 1_000))
    peer = write_rank_failure(tmp_path, 0, RuntimeError("Connection reset by peer"))  # the peer, after it
    os.utime(peer, ns=(2_000, 2_000))
    again = write_rank_failure(tmp_path, 1, ValueError("lr 0.01 is too high at step 3"))  # the entry point, later
    assert again == cause and cause.stat().st_mtime_ns == 1_000  # not rewritten: its time still orders it first
    assert first_rank_failure(tmp_path) == "rank 1: ValueError: lr 0.01 is too high at step 3"
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # a restarted attempt's failures replace the cause
    write_rank_failure(tmp_path, 0, KeyError("x"))
    assert first_rank_failure(tmp_path) == "rank 0: KeyError: 'x'"
