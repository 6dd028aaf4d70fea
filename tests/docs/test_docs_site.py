"""The documentation site builds with warnings as errors, and the README stays a short front page:
at most 120 lines, its links resolving, its test command the one CI runs, nothing pointing
outside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README_MAX_LINES = 120


# mkdocs run where graphtier is not installed: the editable install's finder taken away, as in a
# checkout whose package was never installed (an install compiles the ops).
_WITHOUT_THE_PACKAGE = (
    "import importlib.util, runpy, sys; "
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]; "
    "assert importlib.util.find_spec('graphtier') is None, 'graphtier is still importable'; "
    "sys.argv[0] = 'mkdocs'; runpy.run_module('mkdocs', run_name='__main__', alter_sys=True)"
)


@pytest.mark.parametrize("installed", [True, False], ids=["installed", "checkout-only"])
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_site_builds_strict_without_warnings(tmp_path, installed):
    """`mkdocs build --strict` fails on a broken link, a page left out of the nav, or an API
    page whose module cannot be collected; any WARNING it prints is a failure here too. It builds
    from a checkout whose package is not installed as well."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [
            sys.executable,
            *(["-m", "mkdocs"] if installed else ["-c", _WITHOUT_THE_PACKAGE]),
            "build",
            "--strict",
            "-f",
            str(REPO / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "reference" / "loader" / "index.html").is_file()
    loader_page = (tmp_path / "site" / "reference" / "loader" / "index.html").read_text()
    assert "def connect" in loader_page or "connect(" in loader_page, "the API page holds no signatures"
    # long commands wrap at the page's edge (docs/stylesheets/extra.css), on every page
    start = (tmp_path / "site" / "getting-started" / "index.html").read_text()
    assert 'href="../stylesheets/extra.css"' in start
    assert "white-space: pre-wrap" in (tmp_path / "site" / "stylesheets" / "extra.css").read_text()


def test_the_readme_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, at most {README_MAX_LINES}"


def test_no_text_points_outside_the_repository():
    texts = [
        REPO / "README.md",
        REPO / "mkdocs.yml",
        *sorted((REPO / "docs").rglob("*.md")),
        *sorted((REPO / "deploy").rglob("*.md")),
    ]
    pointing = [str(p.relative_to(REPO)) for p in texts if "../shared" in p.read_text()]
    assert not pointing, f"these point at ../shared, which a user of the repository does not have: {pointing}"


def test_the_readme_links_resolve_and_ci_runs_its_test_command():
    readme = (REPO / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    missing = [t for t in targets if "://" not in t and not (REPO / t).exists()]
    assert targets and not missing, f"README links to files that do not exist: {missing}"
    setup = [line for line in readme.splitlines() if line.startswith("pip install ")]
    assert len(setup) == 2 and setup[1].endswith('python -m pytest -m "not slow and not long" -q'), setup
    assert setup[1] in (REPO / ".ci" / "run").read_text(), ".ci/run no longer runs the README's test command"
