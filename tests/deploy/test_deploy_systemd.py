"""deploy/systemd/graphtierd.service is sandboxed: `systemd-analyze security` (run offline on the
file, where systemd is installed) rates its exposure at most 4.0, and every path the daemon
writes under the shipped config lies in a directory the sandbox leaves writable.

Running the daemon under the unit needs systemd as PID 1, which these tests do not assume."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from graphtier.service.daemon.config import DaemonConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNIT = DEPLOY / "systemd" / "graphtierd.service"
MAX_EXPOSURE = 4.0


def _settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_exposure_is_at_most_4():
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(UNIT)], capture_output=True, text=True, timeout=60
    )
    found = re.search(r"Overall exposure level for graphtierd\.service: (\d+\.\d+)", done.stdout)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    assert float(found.group(1)) <= MAX_EXPOSURE, done.stdout


def test_every_path_the_daemon_writes_is_writable_in_the_sandbox():
    unit = _settings()
    assert unit["ProtectSystem"] == ["strict"] and unit["ProtectHome"] == ["yes"]
    assert unit["NoNewPrivileges"] == ["yes"] and unit["CapabilityBoundingSet"] == [""]
    writable = [Path("/run", d) for d in unit["RuntimeDirectory"]]
    writable += [Path("/var/lib", d) for d in unit["StateDirectory"]]
    writable += [Path(p) for line in unit.get("ReadWritePaths", []) for p in line.split()]
    assert Path("/dev/shm") in writable  # slots and feature tiers
    config = DaemonConfig.build(DEPLOY / "config" / "graphtierd.yaml")
    for name in ("runtime_dir", "dataset_root", "state_dir"):
        path = Path(str(getattr(config, name)).replace("/var/run/", "/run/", 1))  # /var/run links to /run
        assert any(path.is_relative_to(w) for w in writable), f"{name} {path} is read-only under the unit"
