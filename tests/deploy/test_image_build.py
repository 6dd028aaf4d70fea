"""deploy/container/Dockerfile builds and runs, with whichever builder this machine has (a docker
daemon, or podman): `graphtier demo` passes inside the image; the daemon runs under tini as PID 1,
as uid 10001, and its HEALTHCHECK turns healthy; `docker stop` drains it (exit 0); and a rebuild
after a one-line source change reuses the dependency and compiled-ops layers.

The CPU variant is built unless GRAPHTIER_IMAGE_CUDA=1 (the default CUDA build stage needs the
CUDA base image and a CUDA torch, gigabytes). Slow, and skipped where no builder works; the image
size and the rebuild time are printed (-s shows them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "deploy/container/Dockerfile"
CPU_ARGS = [
    "--build-arg",
    "BUILD_IMAGE=ubuntu:24.04",
    "--build-arg",
    "TORCH_INDEX=https://download.pytorch.org/whl/cpu",
]


def _builder() -> str | None:
    for tool in ("docker", "podman"):
        if shutil.which(tool) and subprocess.run([tool, "info"], capture_output=True, timeout=60).returncode == 0:
            return tool
    return None


BUILDER = _builder()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(BUILDER is None, reason="no container builder works here")]


def _run(*argv: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([BUILDER, *argv], capture_output=True, text=True, timeout=timeout)
    assert not check or done.returncode == 0, (
        f"{BUILDER} {argv[:3]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


def _context(into: Path) -> Path:
    """The working tree's files as git sees them (tracked and not ignored), as a build context."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def _build(context: Path, tag: str) -> tuple[str, float]:
    cuda = os.environ.get("GRAPHTIER_IMAGE_CUDA") == "1"
    # podman keeps HEALTHCHECK only in the docker image format.
    progress = ["--progress=plain"] if BUILDER == "docker" else ["--format", "docker"]
    started = time.monotonic()
    done = _run(
        "build", *progress, *([] if cuda else CPU_ARGS), "-f", DOCKERFILE, "-t", tag, str(context), timeout=3600
    )
    return done.stdout + done.stderr, time.monotonic() - started


def _cached(log: str, command: str) -> bool:
    """Whether the build step running `command` came from the cache (BuildKit: "#N CACHED";
    podman/buildah: "--> Using cache")."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if command in line and ("RUN" in line or "STEP" in line):
            following = "\n".join(lines[i : i + 4])
            return "CACHED" in following or "Using cache" in following
    raise AssertionError(f"no build step running {command!r} in the log")


def _healthy(container: str) -> bool:
    """The image's HEALTHCHECK verdict: docker runs it on its own; podman without systemd timers is
    asked to run it now."""
    if BUILDER == "podman":
        return _run("healthcheck", "run", container, check=False).returncode == 0
    health = _run("inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()
    assert health != "unhealthy", _run("logs", container).stderr[-3000:]
    return health == "healthy"


@pytest.fixture
def image(tmp_path):
    tag = f"graphtier-test:{uuid.uuid4().hex[:8]}"
    yield tag, _context(tmp_path / "context")
    _run("rmi", "-f", tag, check=False)


def test_image_builds_runs_the_demo_and_the_daemon_and_rebuilds_from_cache(image):
    tag, context = image
    log, first_s = _build(context, tag)
    size = int(_run("image", "inspect", "-f", "{{.Size}}", tag).stdout)

    demo = _run(
        "run",
        "--rm",
        "--shm-size=2g",
        "--entrypoint",
        "/usr/bin/tini",
        tag,
        "--",
        "graphtier",
        "demo",
        "--scale",
        "13",
        timeout=900,
    )
    assert "[succeeded]" in demo.stdout + demo.stderr and "stopped graphtierd" in demo.stdout + demo.stderr

    name = f"graphtierd-{uuid.uuid4().hex[:8]}"
    _run("run", "-d", "--name", name, "--shm-size=2g", tag)
    try:
        assert _run("exec", name, "cat", "/proc/1/comm").stdout.strip() == "tini"
        assert _run("exec", name, "id", "-u").stdout.strip() == "10001"
        deadline = time.monotonic() + 300
        while not _healthy(name):
            assert time.monotonic() < deadline, _run("logs", name).stderr[-3000:]
            time.sleep(3)
        _run("stop", "-t", "90", name, timeout=120)
        assert _run("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"
    finally:
        _run("rm", "-f", name, check=False)

    touched = context / "launcher" / "cli" / "app.py"
    touched.write_text(touched.read_text() + "# a one-line change\n")
    log, rebuild_s = _build(context, tag)
    assert _cached(log, "pip install -r /tmp/requirements.txt"), "the requirements were installed again"
    assert _cached(log, "build_ext"), "the ops were compiled again"
    print(f"image {size / 2**20:.0f} MiB; build {first_s:.0f} s, rebuild after a one-line change {rebuild_s:.0f} s")
