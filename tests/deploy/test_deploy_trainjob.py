"""deploy/k8s/trainjob.yaml stays true to the code: a Kubeflow Trainer TrainJob whose torchrun runs
graphtier's rank runtime with flags it has, a job spec that validates and agrees with the
TrainJob's shape, and the volumes by which its ranks reach their node's daemon."""

from __future__ import annotations

from pathlib import Path

import yaml

from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.rank_main import build_parser
from graphtier.service.daemon.config import DaemonConfig

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _docs(name: str) -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text())}


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

    override = train_job["spec"]["podTemplateOverrides"][0]
    assert override["targetJobs"] == [{"name": "node"}]
    volumes = {v["name"]: v for v in override["spec"]["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in override["spec"]["containers"][0]["volumeMounts"]}
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
    their runtime; a TrainJob's overrides cannot set these) join the node's."""
    docs = _docs("trainjob.yaml")
    runtime = docs["ClusterTrainingRuntime"]
    assert docs["TrainJob"]["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
    jobs = {job["name"]: job for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
    targets = [target["name"] for target in docs["TrainJob"]["spec"]["podTemplateOverrides"][0]["targetJobs"]]
    assert targets and set(targets) <= set(jobs)
    for name in targets:
        rank_pod = jobs[name]["template"]["spec"]["template"]["spec"]
        assert rank_pod["hostPID"] is True and rank_pod["hostIPC"] is True
    assert "torch" in runtime["spec"]["mlPolicy"]  # torchrun with the PET_* variables, as torch-distributed
    daemon_pod = _docs("graphtierd-daemonset.yaml")["DaemonSet"]["spec"]["template"]["spec"]
    assert daemon_pod["hostPID"] is True and daemon_pod["hostIPC"] is True
