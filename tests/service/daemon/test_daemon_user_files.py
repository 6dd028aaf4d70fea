"""graphtierd deletes only what it made: a `tmp` of the user's in the runtime directory it is given
(a home, say) is refused with one line and kept, where the scratch directory a killed daemon left
is removed."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_a_users_tmp_in_the_runtime_dir_is_kept_and_refused(tmp_path, small_rmat):
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    (home / "tmp" / "draft.txt").write_text("unsaved work")
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "graphtier.service.daemon",
            "--runtime-dir",
            str(home),
            "--dataset-root",
            str(small_rmat.directory.parent),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1, refused.stderr
    assert f"{home / 'tmp'} exists and is not a scratch directory graphtierd made; nothing was removed" in (
        refused.stderr
    )
    assert (home / "tmp" / "draft.txt").read_text() == "unsaved work"
    assert not (home / "daemon.lock").exists() and not (home / "endpoints.json").exists()


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_a_killed_daemons_scratch_is_removed(tmp_path, small_rmat, daemon_processes):
    first = daemon_processes(small_rmat.directory.parent)
    first.start()
    scratch = first.runtime_dir / "tmp"
    first.kill9()
    (scratch / "left-by-a-rank").write_text("stale")
    second = daemon_processes(small_rmat.directory.parent)
    second.start()
    assert f"removed stale {scratch}" in second.log() and not (scratch / "left-by-a-rank").exists()
    assert second.terminate() == 0, second.log()
