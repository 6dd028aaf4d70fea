"""Every metric and label that deploy/prometheus/rules.yaml and the Grafana dashboard query is one a
real daemon exports after a real job: scraped from /metrics, not read from a list kept by hand. The
PromQL is parsed loosely (metric names, `by (...)`, `{label...}` selectors, legend and annotation
labels), enough to catch a renamed metric or label, and no series carries the label `job`, which
Prometheus owns (its target's name) and would rename to `exported_job`."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from graphtier.contract.jobs.spec import JobSpec
from graphtier.contract.jobs.state import JobState
from graphtier.launcher.client import DaemonClient

DEPLOY = Path(__file__).resolve().parents[4] / "deploy"
TARGET_LABELS = {"instance"}  # what Prometheus adds to every scraped series itself (besides `job`)
METRIC = re.compile(r"\b(graphtier(?::[a-z0-9_]+){2}|graphtier_[a-z0-9_]+)(\{[^}]*\})?")
BY = re.compile(r"\bby\s*\(([^)]*)\)")
SELECTOR_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def _scraped_labels(url: str) -> dict[str, set[str]]:
    """Each exported sample name (counters as NAME_total) -> the labels its series carry."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def _queries() -> list[tuple[str, str, set[str]]]:
    """(where, PromQL, labels its legend or annotations name) of every rule, alert and panel target."""
    queries = []
    rules = yaml.safe_load((DEPLOY / "prometheus" / "rules.yaml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            shown = set(re.findall(r"\$labels\.([a-zA-Z_]+)", json.dumps(rule.get("annotations", {}))))
            queries.append((f"rules.yaml {rule.get('record') or rule.get('alert')}", rule["expr"], shown))
    dashboard = json.loads((DEPLOY / "grafana" / "graphtier-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            shown = set(re.findall(r"\{\{\s*([a-zA-Z_]+)\s*\}\}", target.get("legendFormat", "")))
            queries.append((f"dashboard panel {panel['title']!r}", target["expr"], shown))
    return queries


def _recorded_labels(rules_path: Path) -> dict[str, set[str]]:
    """Each recording rule's name -> the labels its `sum by (...)` keeps."""
    rules = yaml.safe_load(rules_path.read_text())
    recorded = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "record" in rule:
                recorded[rule["record"]] = {n.strip() for by in BY.findall(rule["expr"]) for n in by.split(",")}
    return recorded


def _problems(where: str, expr: str, shown: set[str], exported: dict[str, set[str]]) -> list[str]:
    recorded = _recorded_labels(DEPLOY / "prometheus" / "rules.yaml")
    problems = []
    used: dict[str, set[str]] = {}
    for name, selector in METRIC.findall(expr):
        if ":" in name:
            labels = recorded.get(name)
            if labels is None:
                problems.append(f"{where}: {name} is no recording rule of rules.yaml")
                continue
        elif name not in exported:
            problems.append(f"{where}: {name} is not exported (exported: {sorted(exported)})")
            continue
        else:
            labels = exported[name] | TARGET_LABELS
        used[name] = labels
        for label in SELECTOR_LABEL.findall(selector):
            if label not in labels:
                problems.append(f"{where}: {name} has no label {label!r} (it has {sorted(labels)})")
    grouped = {n.strip() for by in BY.findall(expr) for n in by.split(",") if n.strip()}
    for label in grouped:
        for name, labels in used.items():
            if label not in labels:
                problems.append(f"{where}: sums {name} by {label!r}, a label it lacks (it has {sorted(labels)})")
    available = set().union(*used.values()) if used else set()
    for label in shown - available:
        problems.append(f"{where}: shows label {label!r}, which none of its series has")
    return problems


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_every_rule_and_panel_queries_what_a_real_daemon_exports(daemon_processes, small_rmat):
    daemon = daemon_processes(small_rmat.directory.parent)
    endpoints = daemon.start()
    spec = JobSpec(dataset="rmat12", fanouts=[5, 5], batch_size=256, hidden=16, epochs=1, nproc_per_node=1)
    with DaemonClient(endpoints.grpc_target, http_url=endpoints.http_url) as client:
        job_id = client.submit_job(spec).job_id
        deadline = time.monotonic() + 180
        while not client.get_job(job_id).state.final and time.monotonic() < deadline:
            time.sleep(0.3)
        assert client.get_job(job_id).state == JobState.SUCCEEDED
    exported = _scraped_labels(endpoints.http_url)
    assert not [name for name, labels in exported.items() if "job" in labels], "a series has Prometheus's label job"
    assert "job_id" in exported["graphtier_batches_total"]
    queries = _queries()
    assert len(queries) > 10
    problems = [p for where, expr, shown in queries for p in _problems(where, expr, shown, exported)]
    assert not problems, "\n".join(problems)


def test_the_loose_parse_catches_what_it_should():
    exported = {"graphtier_batches_total": {"job_id", "rank"}}
    assert _problems("q", "sum by (job_id) (rate(graphtier_batches_total[1m]))", {"job_id"}, exported) == []
    assert _problems("q", "sum by (job) (rate(graphtier_batches_total[1m]))", set(), exported)
    assert _problems("q", 'graphtier_batches_total{job="1"}', set(), exported)
    assert _problems("q", "graphtier_batches_total", {"job"}, exported)
    assert _problems("q", "rate(graphtier_nothing_total[1m])", set(), exported)
    assert _problems("q", "graphtier:nothing:rate1m > 0", set(), exported)
