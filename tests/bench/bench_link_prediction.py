"""Link prediction: a graphtier job against Adamic-Adar and PyG's GraphSAGE example, on one edge split.

The dataset is prepared once with `--edge-split 0.85,0.05,0.10` (seed 0; val and test edges
removed from the graph, by undirected pair) and 100k random negative pairs per evaluation
split (ogbl-collab's protocol). Then, on exactly that split and those negatives:

(a) graphtier: `graphtier job submit --task link` on a daemon started for the run: producers
    seed batches with train edges and uniform negatives, sample both endpoints, ranks train
    GraphSAGE (over the features, or over learned node embeddings on a featureless graph) and
    the recorded decoder (JOB_FLAGS: mlp+cn+aa, an MLP that also reads each pair's
    common-neighbour features over the training graph, plus the pair's Adamic-Adar weighted by
    validation Hits@50) under torchrun; the job's own result gives test AUC, MRR and Hits@50,
    its log the Adamic-Adar weight the last evaluation chose.
(b) Adamic-Adar over the training graph (the heuristic OGB lists as the baseline to beat),
    scored on the same test positives and negatives.
(c) Cora only: PyG's link-prediction example (examples/link_pred.py: NormalizeFeatures, two
    conv layers 128 -> 64, full batch, Adam lr 0.01, one fresh uniform negative per train edge
    per epoch, 100 epochs) with SAGEConv, over the same train edges, scored by the same metric
    code; run with several seeds, so "within noise" is a spread, not one number.

Targets (issue 25): graphtier test AUC >= 0.90 and Hits@50 >= Adamic-Adar's; on Cora, within
the PyG runs' spread. The first line names the machine and its load.

Run: python tests/bench/bench_link_prediction.py --dataset cora|condmat [--epochs N] [--quick]
(--quick: 2 epochs, 1 PyG seed, 10k negatives; a smoke run.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from bench_sampler import machine_info

from graphtier.launcher.runtime.link_eval import auc, hits_at_k
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.edge_split import EdgeSplitSpec

SHARED = Path(os.environ.get("GRAPHTIER_SHARED_DATASETS", "/work/shared/datasets"))
SOURCES = {
    "cora": (f"planetoid:{SHARED / 'planetoid_cora'}", False),
    "condmat": (f"edges:{SHARED / 'snap_ca-CondMat' / 'CA-CondMat.txt'}", True),
}
# graphtier's job per dataset: flags of `job submit` (tuned once, recorded here so the figures can be re-run)
JOB_FLAGS = {
    "cora": "--fanout 10,5 --batch-size 256 --hidden 256 --lr 0.01 --dropout 0 --decoder mlp+cn+aa".split(),
    "condmat": "--fanout 10,5 --batch-size 1024 --hidden 128 --lr 0.01 --dropout 0 --decoder mlp+cn+aa".split(),
}
HITS_K = 50


def cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graphtier.launcher.cli", *args], capture_output=True, text=True,
                          env=env, timeout=3600)  # fmt: skip


def prepare(name: str, root: Path, negatives: int) -> PreparedDataset:
    source, undirected = SOURCES[name]
    prepare_dataset(
        PrepareConfig(
            source=source,
            name=name,
            undirected=undirected,
            edge_split=EdgeSplitSpec(fractions=(0.85, 0.05, 0.10), seed=0, eval_negatives=negatives),
            root=root,
        )
    )
    return PreparedDataset.open(name, root)


def graphtier_job(
    name: str, root: Path, epochs: int, ranks: int, job_flags: list[str]
) -> tuple[dict[str, float], float, str]:
    """Start a daemon over `root`, run the link job to its end; (metrics, seconds, the command)."""
    run = Path(tempfile.mkdtemp(prefix="gt-linkbench-"))
    env = {**os.environ, "COLUMNS": "200"}
    started = cli("cluster", "start", "--runtime-dir", str(run), "--dataset-root", str(root), env=env)
    if started.returncode:
        raise SystemExit(f"daemon did not start:\n{started.stdout}{started.stderr}")
    flags = ["--dataset", name, "--task", "link", "--epochs", str(epochs), "--nproc-per-node", str(ranks),
             *job_flags]  # fmt: skip
    try:
        t0 = time.perf_counter()
        submitted = cli("job", "submit", "--runtime-dir", str(run), *flags, "--wait", "--json", env=env)
        took = time.perf_counter() - t0
        if submitted.returncode:
            raise SystemExit(f"job failed:\n{submitted.stdout}{submitted.stderr}")
        job = json.loads(submitted.stdout[submitted.stdout.index("{") :])
    finally:
        cli("cluster", "stop", "--runtime-dir", str(run), env=env)
    weights = re.findall(r"Adamic-Adar weighed (\S+) ", Path(job["log_path"]).read_text())
    metrics = {**job["result"]["metrics"], **({"adamic_adar_weight": float(weights[-1])} if weights else {})}
    return metrics, took, "graphtier job submit " + " ".join(flags)


def adamic_adar(ds: PreparedDataset) -> tuple[float, float]:
    """(test AUC, test Hits@50) of the Adamic-Adar score over the training graph."""
    graph = ds.graph
    n = graph.num_nodes
    dst = graph.dst_of_edges().numpy()
    adjacency = sp.csr_matrix((np.ones(graph.num_edges), (graph.row.numpy(), dst)), shape=(n, n))
    adjacency = ((adjacency + adjacency.T) > 0).astype(np.float64)  # common neighbours either way
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    weight = np.where(degree > 1, 1.0 / np.log(np.maximum(degree, 2)), 0.0)
    weighted = adjacency @ sp.diags(weight)

    def score(pairs: torch.Tensor) -> torch.Tensor:
        u, v = pairs[:, 0].numpy(), pairs[:, 1].numpy()
        return torch.from_numpy(np.asarray(weighted[u].multiply(adjacency[v]).sum(axis=1)).ravel())

    pos, neg = score(ds.array("link_test")), score(ds.array("link_test_neg"))
    return auc(pos, neg), hits_at_k(pos, neg, HITS_K)


def pyg_example(ds: PreparedDataset, seed: int, epochs: int = 100) -> tuple[float, float]:
    """PyG's examples/link_pred.py with SAGEConv, full batch, on this split: (test AUC, test Hits@50)."""
    from torch_geometric.nn import SAGEConv
    from torch_geometric.utils import negative_sampling

    torch.manual_seed(seed)
    x = ds.features.clone()
    x = x / x.sum(dim=1, keepdim=True).clamp_min(1)  # NormalizeFeatures
    graph = ds.graph
    edge_index = torch.stack([graph.row, graph.dst_of_edges()])  # the training graph (both directions)
    train = ds.array("link_train").t()

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = SAGEConv(x.shape[1], 128), SAGEConv(128, 64)

        def encode(self) -> torch.Tensor:
            return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        z = model.encode()
        neg = negative_sampling(edge_index, num_nodes=graph.num_nodes, num_neg_samples=train.shape[1])
        pairs = torch.cat([train, neg], dim=1)
        logits = (z[pairs[0]] * z[pairs[1]]).sum(-1)
        target = torch.cat([torch.ones(train.shape[1]), torch.zeros(neg.shape[1])])
        torch.nn.functional.binary_cross_entropy_with_logits(logits, target).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        z = model.encode()

    def score(pairs: torch.Tensor) -> torch.Tensor:
        return (z[pairs[:, 0]] * z[pairs[:, 1]]).sum(-1)

    pos, neg = score(ds.array("link_test")), score(ds.array("link_test_neg"))
    return auc(pos, neg), hits_at_k(pos, neg, HITS_K)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=sorted(SOURCES), default="cora")
    parser.add_argument("--epochs", type=int, default=20, help="epochs of the graphtier job")
    parser.add_argument("--ranks", type=int, default=2, help="trainer ranks of the graphtier job")
    parser.add_argument("--pyg-seeds", type=int, default=3, help="PyG example runs (Cora), for the spread")
    parser.add_argument("--job-flags", help="job submit flags instead of the recorded ones (JOB_FLAGS)")
    parser.add_argument("--root", type=Path, help="where to prepare (default: a temporary directory)")
    parser.add_argument("--quick", action="store_true", help="2 epochs, 1 PyG seed, 10k negatives: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.epochs, args.pyg_seeds = 2, 1
    negatives = 10_000 if args.quick else 100_000
    print(machine_info(torch.get_num_threads()))
    root = args.root or Path(tempfile.mkdtemp(prefix="gt-linkbench-data-"))
    ds = prepare(args.dataset, root, negatives)
    split = ds.manifest.link_split
    print(f"dataset {args.dataset}: {ds.manifest.num_nodes:,} nodes, split {split['sizes']}, "
          f"{negatives:,} test negatives, node inputs: {split['node_inputs']}")  # fmt: skip
    job_flags = args.job_flags.split() if args.job_flags else JOB_FLAGS[args.dataset]
    metrics, took, command = graphtier_job(args.dataset, root, args.epochs, args.ranks, job_flags)
    aa_auc, aa_hits = adamic_adar(ds)
    print(f"{'method':44s} {'test AUC':>9s} {'Hits@50':>8s} {'MRR':>7s}")
    decoder = job_flags[job_flags.index("--decoder") + 1] if "--decoder" in job_flags else "dot"
    print(f"{'graphtier, ' + decoder + ' decoder':44s} {metrics['test_auc']:9.4f} "
          f"{metrics['test_hits@50']:8.4f} {metrics['test_mrr']:7.4f}   {took:.0f} s")  # fmt: skip
    if "adamic_adar_weight" in metrics:
        print(f"{'  its Adamic-Adar weight (validation Hits@50)':44s} {metrics['adamic_adar_weight']:g}")
    print(f"{'Adamic-Adar (training graph)':44s} {aa_auc:9.4f} {aa_hits:8.4f} {'':>7s}")
    pyg: list[tuple[float, float]] = []
    if ds.features is not None and args.pyg_seeds:
        pyg = [pyg_example(ds, seed) for seed in range(args.pyg_seeds)]
        aucs, hits = [a for a, _ in pyg], [h for _, h in pyg]
        spread = statistics.pstdev(aucs) if len(aucs) > 1 else 0.0
        label = f"PyG link_pred.py, SAGEConv, {len(pyg)} seed(s)"
        print(f"{label:44s} {statistics.mean(aucs):9.4f} {statistics.mean(hits):8.4f}   "
              f"AUC range {min(aucs):.4f}-{max(aucs):.4f} (sd {spread:.4f})")  # fmt: skip
    print(f"job: {command}")
    verdict = [
        f"test AUC {metrics['test_auc']:.4f} {'>=' if metrics['test_auc'] >= 0.90 else '<'} 0.90",
        f"Hits@50 {metrics['test_hits@50']:.4f} {'>=' if metrics['test_hits@50'] >= aa_hits else '<'} "
        f"Adamic-Adar {aa_hits:.4f}",
    ]
    if pyg:
        low = min(a for a, _ in pyg) - 0.01
        verdict.append(f"AUC {'within' if metrics['test_auc'] >= low else 'below'} PyG's range - 0.01 ({low:.4f})")
    print("targets: " + "; ".join(verdict))


if __name__ == "__main__":
    main()
