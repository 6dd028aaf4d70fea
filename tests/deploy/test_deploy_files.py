"""deploy/ stays true to the code: its configs validate with the daemon's own models, its
commands and flags exist, and every metric its dashboard and rules query is one the daemon
exports (read from a real MetricsRegistry, not from a list kept by hand)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import typer.main
import yaml

from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.cli.app import app
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.main import command_line
from graphtier.service.daemon.metrics.registry import MetricsRegistry

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _k8s(name: str) -> dict[str, dict]:
    """The documents of a manifest, by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text())}


def _console_scripts() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def _graphtierd_args(argv: list[str]) -> None:
    """Parse like graphtierd does; an unknown flag raises a usage error."""
    command_line().make_context("graphtierd", list(argv))


def test_daemon_configs_validate_and_agree(tmp_path):
    config = DaemonConfig.build(DEPLOY / "config" / "graphtierd.yaml")
    assert config.http_port == 9464 and config.version == 1
    configmap = _k8s("graphtierd-daemonset.yaml")["ConfigMap"]["data"]["graphtierd.yaml"]
    in_cluster = tmp_path / "graphtierd.yaml"
    in_cluster.write_text(configmap)
    assert DaemonConfig.build(in_cluster).model_dump(exclude={"grpc_workers"}) == config.model_dump(
        exclude={"grpc_workers"}
    )


def test_commands_and_flags_exist():
    scripts = _console_scripts()
    unit = (DEPLOY / "systemd" / "graphtierd.service").read_text()
    exec_start = shlex.split(re.search(r"^ExecStart=(.+)$", unit, re.M).group(1))
    assert Path(exec_start[0]).name in scripts
    _graphtierd_args(exec_start[1:])

    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text()
    entrypoint = json.loads(re.search(r"^ENTRYPOINT (.+)$", dockerfile, re.M).group(1))
    assert entrypoint == ["/usr/bin/tini", "--", "graphtierd"] and "graphtierd" in scripts  # tini: PID 1
    _graphtierd_args(json.loads(re.search(r"^CMD (.+)$", dockerfile, re.M).group(1)))

    daemon = _k8s("graphtierd-daemonset.yaml")["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    _graphtierd_args(daemon["args"])

    job = _k8s("train-job.yaml")
    container = job["Job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["graphtier"] and "graphtier" in scripts
    group, command, *flags = container["args"]
    submit = typer.main.get_command(app).commands[group].commands[command]
    known = {opt for param in submit.params for opt in param.opts}
    assert {flag for flag in flags if flag.startswith("--")} <= known
    spec = yaml.safe_load(job["ConfigMap"]["data"]["job.yaml"])
    assert JobSpec.build(spec, source="train-job.yaml").nproc_per_node == 4


def _exported_series() -> set[str]:
    """Series names the daemon's registry exposes: counters as NAME_total, gauges as NAME."""
    metrics = MetricsRegistry(simulated_devices=True)
    metrics.watch(lambda: [], lambda: [])
    names = set()
    for family in metrics.registry.collect():
        names.add(f"{family.name}_total" if family.type == "counter" else family.name)
    return names


def _queried_series() -> dict[str, set[str]]:
    found = {}
    dashboard = json.loads((DEPLOY / "grafana" / "graphtier-dashboard.json").read_text())
    found["grafana"] = {t["expr"] for panel in dashboard["panels"] for t in panel["targets"]}
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    found["rules"] = {rule["expr"] for group in rules["groups"] for rule in group["rules"]}
    return {where: set(re.findall(r"\bgraphtier_[a-z_]+", " ".join(exprs))) for where, exprs in found.items()}


@pytest.mark.parametrize("where", ["grafana", "rules"])
def test_every_queried_metric_is_exported(where):
    exported = _exported_series()
    queried = _queried_series()[where]
    assert queried, f"{where} queries no graphtier metric"
    assert queried <= exported, f"{where} queries series the daemon does not export: {sorted(queried - exported)}"


def test_rules_are_well_formed():
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert ("record" in rule) != ("alert" in rule) and rule["expr"].strip()
            if "record" in rule:
                assert re.fullmatch(r"graphtier:[a-z_]+:[a-z0-9]+", rule["record"])  # level:metric:operations
    for name in ("scrape.yaml", "scrape-kubernetes.yaml"):
        scrape = yaml.safe_load((DEPLOY / "prometheus" / name).read_text())
        assert {job["metrics_path"] for job in scrape["scrape_configs"]} == {"/metrics"}, name


PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian: apt-get install prometheus)"
)

# Two jobs on one target that Prometheus labels job="graphtier": the per-job rules must keep them apart.
RULE_TESTS = """
rule_files: [{rules}]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'graphtier_batches_total{{instance="a",job="graphtier",job_id="1",rank="0"}}'
        values: '0+60x20'
      - series: 'graphtier_batches_total{{instance="a",job="graphtier",job_id="2",rank="0"}}'
        values: '0+120x20'
      - series: 'graphtier_data_wait_seconds_total{{instance="a",job="graphtier",job_id="1",rank="0"}}'
        values: '0+30x20'
      - series: 'graphtier_train_seconds_total{{instance="a",job="graphtier",job_id="1",rank="0"}}'
        values: '0+30x20'
      - series: 'graphtier_data_wait_seconds_total{{instance="a",job="graphtier",job_id="2",rank="0"}}'
        values: '0+0x20'
      - series: 'graphtier_train_seconds_total{{instance="a",job="graphtier",job_id="2",rank="0"}}'
        values: '0+60x20'
    promql_expr_test:
      - expr: graphtier:batches:rate1m
        eval_time: 10m
        exp_samples:
          - labels: 'graphtier:batches:rate1m{{instance="a",job_id="1"}}'
            value: 1
          - labels: 'graphtier:batches:rate1m{{instance="a",job_id="2"}}'
            value: 2
    alert_rule_test:
      - eval_time: 15m
        alertname: GraphtierDataBound
        exp_alerts:
          - exp_labels: {{severity: warning, instance: a, job_id: "1"}}
            exp_annotations: {{summary: "ranks of job 1 wait for data 50% of the time"}}
"""


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, check=False)


@needs_promtool
def test_promtool_accepts_the_rules():
    checked = _promtool("check", "rules", str(DEPLOY / "prometheus" / "rules.yaml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_promtool
def test_the_scrape_config_is_a_whole_configuration_debians_prometheus_accepts():
    # Debian's Prometheus is built without Kubernetes discovery: scrape.yaml must not need it, and loads
    # rules.yaml beside it (promtool checks those too)
    checked = _promtool("check", "config", str(DEPLOY / "prometheus" / "scrape.yaml"))
    assert checked.returncode == 0 and "1 rule files found" in checked.stdout, checked.stdout + checked.stderr


@needs_promtool
def test_per_job_rules_and_alerts_keep_jobs_apart(tmp_path):
    tests = tmp_path / "rules-test.yaml"
    tests.write_text(RULE_TESTS.format(rules=json.dumps(str(DEPLOY / "prometheus" / "rules.yaml"))))
    ran = _promtool("test", "rules", str(tests))
    assert ran.returncode == 0, ran.stdout + ran.stderr


@pytest.mark.skipif(bool(__import__("torch").version.cuda), reason="a CUDA torch: the GPU image's requirements")
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_cpu_image_takes_setups_requirements_but_the_gpu_tiers_packages():
    # deploy/container/requirements.py beside a CPU torch, as the CPU image's build runs it
    done = subprocess.run(
        [sys.executable, str(DEPLOY / "container" / "requirements.py"), str(REPO / "setup.py")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split()
    assert {"numpy>=1.24", "grpcio>=1.85.1", "cryptography>=42"} <= set(listed), listed
    assert not [r for r in listed if r.startswith(("nvidia-ml-py", "cuda-bindings", "torch"))], listed
    # nor what the runtime does without: scipy (numpy reads the sparse sources), matplotlib (the plots extra)
    assert not [r for r in listed if r.startswith(("scipy", "matplotlib"))], listed
