"""deploy/ stays true to the code: its configs validate with the daemon's own models, its
commands and flags exist, and every metric its dashboard and rules query is one the daemon
exports (read from a real MetricsRegistry, not from a list kept by hand)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import tomllib
import typer.main
import yaml

from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.cli.app import app
from graphtier.service.daemon.config import DaemonConfig
from graphtier.service.daemon.main import build_parser
from graphtier.service.daemon.metrics.registry import MetricsRegistry

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _k8s(name: str) -> dict[str, dict]:
    """The documents of a manifest, by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text())}


def _console_scripts() -> dict[str, str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def _graphtierd_args(argv: list[str]) -> None:
    """Parse like graphtierd does; argparse exits on an unknown flag."""
    build_parser().parse_args(argv)


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
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "scrape.yaml").read_text())
    assert {job["metrics_path"] for job in scrape["scrape_configs"] if "metrics_path" in job} == {"/metrics"}
