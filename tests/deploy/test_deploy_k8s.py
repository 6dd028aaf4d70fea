"""Every Kubernetes manifest in deploy/k8s/ is valid, strictly (a field the schema does not define
is an error): the built-in kinds under `kubernetes-validate --strict` for the newest Kubernetes it
knows, the Kubeflow Trainer kinds under that release's CRDs (test_deploy_trainjob.py). And the
DaemonSet runs as written: a non-root daemon whose hostPath directories are handed to its user
before it starts, its job history on the node, and the node's GPUs visible without taking them
from the trainer pods."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from graphtier.service.daemon.config import DaemonConfig

kubernetes_validate = pytest.importorskip("kubernetes_validate")

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
TRAINER_GROUP = "trainer.kubeflow.org/"


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_strictly_valid(manifest):
    version = kubernetes_validate.latest_version()
    docs = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc]
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith(TRAINER_GROUP):
            continue  # validated against the Trainer CRDs in test_deploy_trainjob.py
        kubernetes_validate.validate(doc, version, strict=True)  # raises, naming the field


def test_strict_validation_refuses_a_misspelt_field():
    daemon_set = _daemon_set()
    daemon_set["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemon_set, kubernetes_validate.latest_version(), strict=True)


def _docs() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / "graphtierd-daemonset.yaml").read_text())}


def _daemon_set() -> dict:
    return _docs()["DaemonSet"]


def _image_uid() -> int:
    dockerfile = (DEPLOY / "container" / "Dockerfile").read_text()
    return int(re.search(r"useradd [^\n]*--uid (\d+)", dockerfile).group(1))


def test_the_daemon_writes_only_to_hostpaths_its_user_owns(tmp_path):
    pod = _daemon_set()["spec"]["template"]["spec"]
    uid = _image_uid()
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == uid
    volumes = {v["name"]: v for v in pod["volumes"]}
    (daemon,) = pod["containers"]
    host_mounts = {
        m["mountPath"]: volumes[m["name"]]["hostPath"]["path"]
        for m in daemon["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }
    config_file = tmp_path / "graphtierd.yaml"
    config_file.write_text(_docs()["ConfigMap"]["data"]["graphtierd.yaml"])
    config = DaemonConfig.build(config_file)

    (init,) = pod["initContainers"]
    assert init["securityContext"]["runAsUser"] == 0
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    script = " ".join(init["args"])
    owned = set(re.search(rf"chown {uid}:{uid} ([^&]+)", script).group(1).split())
    init_mounts = {m["mountPath"] for m in init["volumeMounts"]}
    for name in ("runtime_dir", "dataset_root", "state_dir"):
        path = Path(getattr(config, name))
        mount = next((Path(m) for m in host_mounts if path.is_relative_to(m)), None)
        assert mount is not None, f"{name} {path} is not on a hostPath: lost when the pod restarts"
        assert str(path) in owned, f"{name} {path} is left root-owned by the kubelet"
        assert any(path.is_relative_to(m) for m in init_mounts)


def test_gpus_are_visible_to_the_daemon_without_a_request():
    (daemon,) = _daemon_set()["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in daemon["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and "utility" in env["NVIDIA_DRIVER_CAPABILITIES"]
    resources = daemon["resources"]
    assert not [r for part in resources.values() for r in part if r.startswith("nvidia.com/")]
