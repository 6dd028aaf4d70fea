"""deploy/k8s/trainjob.yaml stays true to the code and to Kubeflow Trainer: a TrainJob whose torchrun
runs graphtier's rank runtime with flags it has, a job spec that validates and agrees with the
TrainJob's shape, the volumes by which its ranks reach their node's daemon, and every document
valid under the CRD schemas of the Trainer release it names (deploy/k8s/crds/trainer-v*/), strictly:
a field the schema does not define is an error, as under `kubectl apply --validate=strict`."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.rank_main import build_parser
from graphtier.service.daemon.config import DaemonConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _docs(name: str) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text())}


def _trainer_crds() -> tuple[str, dict[str, dict]]:
    """The Trainer release whose CRDs the repository carries, and those CRDs by kind."""
    (folder,) = (DEPLOY / "k8s" / "crds").glob("trainer-v*")
    crds = {}
    for path in folder.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                crds[doc["spec"]["names"]["kind"]] = doc
    return folder.name.removeprefix("trainer-v"), crds


def _strict(schema: object) -> object:
    """A CRD's structural schema as JSON Schema that refuses unknown fields (the API server prunes
    them silently; strict validation reports them) and knows Kubernetes' int-or-string."""
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _strict(value) for key, value in schema.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    closed = "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields")
    if closed and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def test_trainjob_names_the_trainer_release_whose_crds_it_validates_against():
    release, crds = _trainer_crds()
    text = (DEPLOY / "k8s" / "trainjob.yaml").read_text()
    named = set(re.findall(r"Kubeflow\s+#?\s*Trainer v(\d+\.\d+)", text))
    assert named == {release.rsplit(".", 1)[0]}, f"trainjob.yaml names Trainer {named}, the CRDs are v{release}"
    for kind, doc in _docs("trainjob.yaml").items():
        if kind == "ConfigMap":
            continue
        group, version = doc["apiVersion"].split("/")
        crd = crds[kind]
        assert crd["spec"]["group"] == group
        (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
        errors = sorted(
            jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"])).iter_errors(doc), key=str
        )
        assert not errors, f"{kind} is invalid under Trainer v{release}: " + "; ".join(
            f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors[:5]
        )


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_strict_check_refuses_the_fields_older_trainers_had():
    """v2.1's podTemplateOverrides is gone since v2.2: a TrainJob with it must fail validation."""
    _, crds = _trainer_crds()
    job = _docs("trainjob.yaml")["TrainJob"]
    schema = _strict(crds["TrainJob"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    old = {**job, "spec": {**job["spec"], "podTemplateOverrides": [{"targetJobs": [{"name": "node"}]}]}}
    with pytest.raises(jsonschema.ValidationError, match="podTemplateOverrides"):
        jsonschema.validate(old, schema, cls=jsonschema.Draft7Validator)


def test_trainjob_runs_the_rank_runtime_against_the_node_daemon(tmp_path):
    docs = _docs("trainjob.yaml")
    train_job = docs["TrainJob"]
    assert train_job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    trainer = train_job["spec"]["trainer"]
    assert trainer["numNodes"] >= 2 and trainer["numProcPerNode"] >= 1
    command = trainer["command"]
    assert command[:3] == ["torchrun", "-m", "graphtier.launcher.rank_main"]  # torchrun reads PET_*
    args = build_parser().parse_args(command[3:])
    assert args.spec is not None and args.job_id is None

    (patch,) = train_job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert patch["name"] == "node"
    pod = patch["template"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["spec"]["configMap"]["name"] == docs["ConfigMap"]["metadata"]["name"]
    assert args.spec.parent == Path(mounts["spec"])
    spec_file = tmp_path / args.spec.name
    spec_file.write_text(docs["ConfigMap"]["data"][args.spec.name])
    spec = JobSpec.from_yaml(spec_file)
    assert spec.nproc_per_node == trainer["numProcPerNode"]

    daemon_set = _docs("graphtierd-daemonset.yaml")
    config = tmp_path / "graphtierd.yaml"
    config.write_text(daemon_set["ConfigMap"]["data"]["graphtierd.yaml"])
    runtime_dir = str(DaemonConfig.build(config).runtime_dir)
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["GRAPHTIER_RUNTIME_DIR"] == runtime_dir == mounts["runtime"]
    assert volumes["runtime"]["hostPath"]["path"] == runtime_dir
    pod = daemon_set["DaemonSet"]["spec"]["template"]["spec"]
    daemon_volumes = {v["name"]: v for v in pod["volumes"]}
    assert daemon_volumes["runtime"]["hostPath"]["path"] == runtime_dir
    # the ranks map the daemon's segments: both pods mount the node's /dev/shm
    assert daemon_volumes["dshm"]["hostPath"]["path"] == volumes["dshm"]["hostPath"]["path"] == "/dev/shm"
    assert mounts["dshm"] == "/dev/shm"


def test_ranks_and_daemon_share_the_node_pid_and_ipc_namespaces_for_cuda_ipc():
    """Legacy CUDA IPC handles open only within the exporter's PID namespace, and peer reads over
    NVLink across containers need one IPC namespace: the daemon's pod and the ranks' pods (through
    their runtime; a TrainJob's runtimePatches cannot set these) join the node's."""
    docs = _docs("trainjob.yaml")
    runtime = docs["ClusterTrainingRuntime"]
    assert docs["TrainJob"]["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    jobs = {job["name"]: job for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    patches = docs["TrainJob"]["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    targets = [job["name"] for job in patches["replicatedJobs"]]
    assert targets and set(targets) <= set(jobs)
    for name in targets:
        rank_pod = jobs[name]["template"]["spec"]["template"]["spec"]
        assert rank_pod["hostPID"] is True and rank_pod["hostIPC"] is True
    assert "torch" in runtime["spec"]["mlPolicy"]  # torchrun with the PET_* variables, as torch-distributed
    daemon_pod = _docs("graphtierd-daemonset.yaml")["DaemonSet"]["spec"]["template"]["spec"]
    assert daemon_pod["hostPID"] is True and daemon_pod["hostIPC"] is True
