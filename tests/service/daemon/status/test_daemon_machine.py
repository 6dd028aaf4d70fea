"""The daemon's machine report and NVML collector: logged at start, in /v1/status, drawn on the page,
and no thread left behind when the daemon stops."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from graphtier.contract.machine import CHECK_NAMES
from graphtier.contract.status import DaemonStatus
from graphtier.launcher.client import DaemonClient
from graphtier.service.daemon.main import main as graphtierd
from graphtier.service.hardware import nvml

OUR_THREADS = ("graphtier-nvml", "graphtier-cuda-probe")


def _nvml_works() -> bool:
    try:
        with nvml.session():
            return True
    except nvml.NvmlUnavailable:
        return False


def test_status_carries_the_machine_report_and_what_nvml_measured(inproc_daemon):
    url = inproc_daemon.endpoints.http_url
    status = DaemonStatus.model_validate(httpx.get(url + "/v1/status", timeout=10).json())
    machine = status.machine
    assert [c.name for c in machine.checks] == list(CHECK_NAMES) and machine.summary
    assert machine.check("dev_shm").status == "ok" and machine.check("dev_shm").details["total_bytes"] > 0
    if not machine.cuda:  # the CUDA checks never run inside the daemon: at most a subprocess does
        assert machine.check("host_register").status == "unavailable"
    measured = status.measured
    assert measured.interval_s == inproc_daemon.config.nvml_interval_s
    exposition = httpx.get(url + "/metrics", timeout=10).text
    if _nvml_works():
        assert measured.gpus or measured.reason
        for gpu in measured.gpus:
            assert gpu.method is not None or gpu.unavailable_reason
    else:
        assert not measured.enabled and measured.gpus == [] and measured.reason.startswith("NVML: ")
        assert "graphtier_pcie_measured" not in exposition and "graphtier_nvlink_measured" not in exposition
        assert machine.check("nvml_pcie_counters").reason == measured.reason
    with DaemonClient(inproc_daemon.endpoints.grpc_target, http_url=url) as client:
        assert client.status().machine.summary == machine.summary


def test_collector_and_probe_threads_stop_with_the_daemon(make_inproc_daemon):
    daemon = make_inproc_daemon(nvml_interval_s=0.1)
    threads = [t for t in (daemon.nvml.thread, daemon.machine.thread) if t is not None]
    daemon.stop()
    assert not any(t.is_alive() for t in threads)
    assert not [t.name for t in threading.enumerate() if t.name in OUR_THREADS]


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_daemon_logs_every_check_at_start(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent, "--nvml-interval", "0.5", "--cuda-probe-timeout", "0")
    daemon.start()
    assert daemon.terminate() == 0
    log = daemon.log()
    for name in CHECK_NAMES:
        assert f"machine: {name} " in log, log
    assert "NVML collector" in log
    if not _nvml_works():
        assert "NVML collector off: NVML: " in log


@pytest.mark.parametrize(
    ("flag", "value", "expected"),
    [
        ("--nvml-interval", "0.01", "nvml_interval_s: Value error, must be 0 (off) or at least 0.1 s"),
        ("--nvml-interval", "-1", "nvml_interval_s: Input should be greater than or equal to 0"),
        ("--cuda-probe-timeout", "1000", "cuda_probe_timeout_s: Input should be less than or equal to 600"),
    ],
)
def test_bad_intervals_are_refused_before_start(tmp_path, capsys, flag, value, expected):
    assert graphtierd(["--runtime-dir", str(tmp_path / "run"), flag, value]) == 2
    assert expected in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


HARNESS = r"""
const fs = require("fs");
const [page, ...statuses] = process.argv.slice(2);
const script = fs.readFileSync(page, "utf8").match(/<script>([\s\S]*)<\/script>/)[1];
const elements = {};
const ctx = new Proxy({}, {get: (t, k) => (k in t ? t[k] : () => {}), set: (t, k, v) => { t[k] = v; return true; }});
global.document = {getElementById: id => elements[id] || (elements[id] = {innerHTML: "", textContent: "",
  value: "", dataset: {}, clientWidth: 300, clientHeight: 180, getContext: () => ctx, addEventListener: () => {}})};
global.devicePixelRatio = 1;
let n = 0;
global.fetch = async () => { const body = fs.readFileSync(statuses[Math.min(n++, statuses.length - 1)], "utf8");
  return {ok: true, json: async () => JSON.parse(body)}; };
global.setTimeout = fn => { if (n < statuses.length) Promise.resolve().then(fn); };
eval(script);
setTimeout(() => {}, 0);
process.on("beforeExit", () => { if (elements.printed) return; elements.printed = 1;
  const out = {}; for (const [k, v] of Object.entries(elements)) out[k] = v.innerHTML || v.textContent;
  console.log(JSON.stringify(out)); });
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: the page's script cannot be run")
def test_page_draws_measured_beside_accounted_pcie_and_the_machine(inproc_daemon, tmp_path):
    url = inproc_daemon.endpoints.http_url
    (tmp_path / "page.html").write_text(httpx.get(url + "/", timeout=10).text)
    for name in ("s1.json", "s2.json"):
        (tmp_path / name).write_text(httpx.get(url + "/v1/status", timeout=10).text)
    (tmp_path / "harness.js").write_text(HARNESS)
    done = subprocess.run(
        ["node", "harness.js", "page.html", "s1.json", "s2.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    status = DaemonStatus.model_validate_json(Path(tmp_path / "s2.json").read_text())
    assert shown.get("error", "") == "" and "PCIe accounted" in shown["tiles"]
    assert shown["machine_summary"] == status.machine.summary
    for name in CHECK_NAMES:
        assert f"<td>{name}</td>" in shown["machine"]
    if status.measured.pcie_rx_bytes is None:
        assert "PCIe measured (H2D)<b>not measured" in shown["tiles"]
        assert shown["measured_note"] == f"not measured: {status.measured.reason}" or status.measured.gpus
    else:
        assert "pcie_measured" in shown["l_link"]
