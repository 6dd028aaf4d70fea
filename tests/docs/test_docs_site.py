"""The documentation site builds with warnings as errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_site_builds_strict_without_warnings(tmp_path):
    """`mkdocs build --strict` fails on a broken link, a page left out of the nav, or an API
    page whose module cannot be collected; any WARNING it prints is a failure here too."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    output = built.stdout + built.stderr
    assert built.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "reference" / "loader" / "index.html").is_file()
    loader_page = (tmp_path / "site" / "reference" / "loader" / "index.html").read_text()
    assert "def connect" in loader_page or "connect(" in loader_page, "the API page holds no signatures"

