"""Every shell command the documentation shows is run, so the pages cannot drift from the code.

A page's ```bash blocks run in order as one script (`set -euo pipefail`), in a fresh directory
that holds the repository's `examples/` and `deploy/` as a checkout does, with a private
GRAPHTIER_HOME (datasets, the daemon's runtime directory) and this run's shared-memory namespace.
A block that cannot run on a CI machine (a Kubernetes cluster, systemd, a GPU, a dataset to
download) is preceded by `<!-- not-run: the reason -->`; anything else must run and exit 0. A
page must stop the daemons it starts: one left running fails its test (and is stopped here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from graphtier.contract.endpoints import LOCK_FILE, running_daemon_pid

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
NOT_RUN = re.compile(r"^<!--\s*not-run:(?P<reason>.*?)-->\s*$")
OTHER_SHELLS = {"sh", "shell", "console", "zsh", "shell-session", "shellsession"}
PAGE_TIMEOUT_S = 400
CHECKOUT_FOLDERS = ("examples", "deploy")  # what the pages use from a checkout, relative to its root
TOOLS = ("curl", "openssl")  # programs beyond graphtier and python that pages call


@dataclass(frozen=True)
class ShellBlock:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    not_run: str | None  # the reason given, when marked not-run


def shell_blocks(page: Path) -> tuple[list[ShellBlock], list[str]]:
    """The page's ```bash blocks, and the problems found: other shell fences (which would not run),
    not-run markers without a reason or without a bash block right after them."""
    blocks: list[ShellBlock] = []
    problems: list[str] = []
    lines = page.read_text().splitlines()
    where = page.relative_to(REPO)
    marker: tuple[int, str] | None = None  # (line, reason) of a not-run comment awaiting its block
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence is None:
            if (m := NOT_RUN.match(line.strip())) is not None:
                if marker is not None:
                    problems.append(f"{where}:{marker[0]}: not-run marker with no ```bash block right after it")
                marker = (i + 1, m.group("reason").strip())
            elif line.strip() and marker is not None:
                problems.append(f"{where}:{marker[0]}: not-run marker with no ```bash block right after it")
                marker = None
            i += 1
            continue
        start, closing, info = i, fence.group("fence"), fence.group("info").lower()
        i += 1
        body: list[str] = []
        while i < len(lines) and not lines[i].strip().startswith(closing):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if info == "bash":
            reason = marker[1] if marker is not None else None
            if reason is not None and len(reason) < 10:
                problems.append(f"{where}:{marker[0]}: a not-run marker must say why (got {reason!r})")
            blocks.append(ShellBlock(page, start + 1, "\n".join(body), reason))
        else:
            if info in OTHER_SHELLS:
                problems.append(
                    f"{where}:{start + 1}: ```{info} is never run: use ```bash (run by the tests) or ```text for output"
                )
            if marker is not None:
                problems.append(f"{where}:{marker[0]}: not-run marker before a ```{info or 'plain'} block, not ```bash")
        marker = None
    if marker is not None:
        problems.append(f"{where}:{marker[0]}: not-run marker with no ```bash block right after it")
    return blocks, problems


PAGES = sorted(DOCS.rglob("*.md"))
RUN_PAGES = [p for p in PAGES if any(b.not_run is None for b in shell_blocks(p)[0])]


def test_every_shell_block_runs_or_says_why_not():
    problems = [problem for page in PAGES for problem in shell_blocks(page)[1]]
    assert not problems, "\n".join(problems)
    assert RUN_PAGES, "no page has a command the tests run"
    for page in (DOCS / "getting-started.md", *sorted((DOCS / "guides").glob("*.md"))):
        assert page in RUN_PAGES, f"{page.relative_to(REPO)} shows no command the tests run"


def logical_commands(code: str) -> list[str]:
    """A block's commands: continuation lines joined, trailing `  # comments` dropped, spaces collapsed."""
    commands: list[str] = []
    pending = ""
    for line in code.splitlines():
        line = re.split(r"\s{2,}#", line, maxsplit=1)[0].rstrip()
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command = " ".join((pending + line).split())
        pending = ""
        if command:
            commands.append(command)
    return commands


def test_the_readme_tour_is_run_by_the_pages():
    """The README's tour shows only commands some page runs, so the front page cannot drift either
    (the two set-up commands are CI's own: .ci/run runs the second verbatim)."""
    readme = REPO / "README.md"
    blocks = re.findall(r"^```bash\n(.*?)^```", readme.read_text(), flags=re.M | re.S)
    tour = [c for block in blocks for c in logical_commands(block) if not c.startswith("pip install ")]
    ran = {
        c for page in RUN_PAGES for b in shell_blocks(page)[0] if b.not_run is None for c in logical_commands(b.code)
    }
    assert tour, "the README shows no tour"
    missing = [c for c in tour if c not in ran]
    assert not missing, f"README commands no documentation page runs: {missing}"


def _script(page: Path) -> str:
    parts = ["set -euo pipefail", "set -x"]
    for block in shell_blocks(page)[0]:
        if block.not_run is None:
            parts += [f"# --- {page.relative_to(REPO)}:{block.line}", block.code]
    return "\n".join(parts) + "\n"


def _stop_daemons(under: Path) -> list[Path]:
    """Stop every daemon whose runtime directory is under `under`; return their directories."""
    left = [lock.parent for lock in under.rglob(LOCK_FILE) if running_daemon_pid(lock.parent) is not None]
    for runtime_dir in left:
        subprocess.run(
            [sys.executable, "-m", "graphtier.launcher.cli", "cluster", "stop", "--runtime-dir", str(runtime_dir)],
            capture_output=True,
            timeout=120,
        )
    return left


@pytest.fixture
def page_dir():
    """A working directory shaped like a checkout; afterwards no daemon of the page may be left."""
    base = Path(tempfile.mkdtemp(prefix="gtdoc-", dir="/tmp"))  # short: Unix socket paths are limited
    work = base / "work"
    work.mkdir()
    for name in CHECKOUT_FOLDERS:
        (work / name).symlink_to(REPO / name, target_is_directory=True)
    try:
        yield work
    finally:
        left = _stop_daemons(base)
        from graphtier.service.shm import reclaim_stale_segments

        reclaim_stale_segments()
        shutil.rmtree(base, ignore_errors=True)
    assert not left, f"the page left daemons running (stopped now): {[str(d) for d in left]}"


@pytest.mark.long  # a page is a walk-through: daemons, datasets, training jobs (15-90 s each)
@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(DOCS)) for p in RUN_PAGES])
def test_the_pages_commands_run(page: Path, page_dir: Path):
    script = _script(page)
    lacking = [tool for tool in TOOLS if re.search(rf"\b{tool}\b", script) and shutil.which(tool) is None]
    assert not lacking, f"{page.relative_to(REPO)} runs {lacking}, which this machine lacks: install them"
    (page_dir.parent / "page.sh").write_text(script)
    env = {
        **os.environ,
        "GRAPHTIER_HOME": str(page_dir.parent / "graphtier-home"),
        "COLUMNS": "100",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("GRAPHTIER_RUNTIME_DIR", None)
    try:
        ran = subprocess.run(
            ["bash", str(page_dir.parent / "page.sh")],
            cwd=page_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=PAGE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{page.relative_to(REPO)}: its commands ran past {PAGE_TIMEOUT_S} s\n{exc.stdout}\n{exc.stderr}")
    tail = f"{ran.stdout[-6000:]}\n--- stderr\n{ran.stderr[-6000:]}"
    assert ran.returncode == 0, f"{page.relative_to(REPO)}: a command failed (exit {ran.returncode})\n{tail}"
