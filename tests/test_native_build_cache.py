"""Rebuilding the C++ ops recompiles only what changed (issue 11: every reinstall took 76-159 s).

Builds the ops from a copy of `setup.py` and `native/` twice with setuptools' `build_ext`, the
step pip runs for an install: the second build must find every object up to date, and after one
source is touched exactly that one is compiled again. Slow (one full build), so not in the
default run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def build(root: Path) -> str:
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--build-lib", "out"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout + done.stderr


def compiled(output: str) -> list[str]:
    """The ninja steps that ran ("[2/3] c++ -MMD ... -c .../x.cpp -o .../x.o"; torch's rules may
    repeat the -c)."""
    return re.findall(r"^\[\d+/\d+\] .*? -c (?:-c )*(\S+)", output, re.M)


@pytest.mark.slow
def test_a_rebuild_recompiles_only_changed_sources(tmp_path):
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "native", tmp_path / "native")
    for folder in ("service", "launcher", "contract", "proto/graphtier/v1"):
        (tmp_path / folder).mkdir(parents=True)
    sources = sorted(p.name for p in (tmp_path / "native" / "cpu").glob("*.cpp"))

    first = compiled(build(tmp_path))
    assert sorted(Path(s).name for s in first) == sources
    assert list((tmp_path / "build" / "native").iterdir()), "no cache directory under build/native"

    second = build(tmp_path)
    assert compiled(second) == [] and "no work to do" in second

    touched = tmp_path / "native" / "cpu" / sources[-1]
    touched.write_text(touched.read_text() + "\n")
    assert [Path(s).name for s in compiled(build(tmp_path))] == [sources[-1]]
    assert list((tmp_path / "out" / "graphtier" / "service").glob("_native*.so"))
