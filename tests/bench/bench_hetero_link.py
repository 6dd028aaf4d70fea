"""Link prediction on a heterogeneous graph's target relation: graphtier's link job against a path heuristic.

ACM (`ogb_hetero_acm`) is prepared once with `--edge-split 0.85,0.05,0.10 --target-relation
REL` (seed 0; val and test edges leave the graph both ways) and 100k negative pairs of the
relation's head and tail types per evaluation split. Then, on exactly that split:

(a) graphtier: `graphtier job submit --task link --model rgcn` on a daemon started for the run
    (`--via job`, the default: producers sample the relation's edges from the tiers), or
    `torchrun --nproc-per-node 2 examples/hetero_link.py` (`--via example`: the same model in the
    ranks' own processes). R-GCN encoder, MLP decoder, one corrupted tail per edge, OGB's
    protocol from link_eval: test AUC, MRR, Hits@50 (the example's at its epoch of best
    validation AUC, the job's at its last epoch, as its result reports them).
(b) Adamic-Adar along 3-hop paths over the training graph (every relation, both directions):
    score(h, t) = sum over paths h - x - q - t of 1/log(deg x). A head and a tail of different
    types share no neighbour, so plain Adamic-Adar is 0 for every pair; one more hop makes it the
    vote of the head's Adamic-Adar neighbours (a paper's co-authored papers) for the tail. Scored
    on the same positives, pool and MRR tails.

Run: python tests/bench/bench_hetero_link.py [--via job|example] [--relation paper-has_subject-subject] [--epochs N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from bench_link_prediction import graphtier_job
from bench_sampler import machine_info

from graphtier.launcher.runtime.link_eval import auc, hits_at_k, mrr, mrr_tails
from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset
from graphtier.service.prepared.edge_split import EdgeSplitSpec, link_array

SHARED = Path(os.environ.get("GRAPHTIER_SHARED_DATASETS", "/work/shared/datasets"))
REPO = Path(__file__).resolve().parents[2]
HITS_K = 50
# the job's flags: the example's defaults (fanouts 10;10, batch 256, hidden 64, dropout 0.2, lr 0.005, one
# corrupted tail per edge, MLP decoder)
JOB_FLAGS = (
    "--model rgcn --fanout 10;10 --batch-size 256 --hidden 64 --dropout 0.2 --lr 0.005 --negatives 1 "
    "--negative-sampling corrupt-tail --decoder mlp"
).split()


def prepare(relation: str, root: Path) -> PreparedDataset:
    spec = EdgeSplitSpec.parse("0.85,0.05,0.10", target_relation=relation)
    source = f"ogb:{SHARED / 'ogb_hetero_acm'}"
    prepare_dataset(PrepareConfig(source=source, name="acm-link", root=root, edge_split=spec, overwrite=True))
    return PreparedDataset(root / "acm-link")


def hetero_link_job(root: Path, epochs: int, ranks: int, flags: list[str]) -> tuple[dict, float, str]:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
        "--log-dir", str(root / "torchelastic"),  # not a /tmp/torchelastic_* left behind per run
        str(REPO / "examples" / "hetero_link.py"), "--dataset", "acm-link", "--root", str(root),
        "--epochs", str(epochs), *flags,
    ]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    shown = f"torchrun --nproc-per-node {ranks} examples/hetero_link.py --dataset acm-link --epochs {epochs}"
    return result, time.perf_counter() - started, " ".join([shown, *flags])


def path_adamic_adar(ds: PreparedDataset) -> dict[str, float]:
    """Test AUC, MRR and Hits@50 of the 3-hop Adamic-Adar score (module docstring) over the training graph."""
    graph = ds.graph
    n = graph.num_nodes
    dst = graph.dst_of_edges().numpy()
    adjacency = sp.csr_matrix((np.ones(graph.num_edges), (graph.row.numpy(), dst)), shape=(n, n))
    adjacency = ((adjacency + adjacency.T) > 0).astype(np.float64)
    degree = np.asarray(adjacency.sum(axis=1)).ravel()
    weight = np.where(degree > 1, 1.0 / np.log(np.maximum(degree, 2)), 0.0)
    two_hop = (adjacency @ sp.diags(weight) @ adjacency).tocsr()

    def score(pairs: torch.Tensor) -> torch.Tensor:
        u, v = pairs[:, 0].numpy(), pairs[:, 1].numpy()
        return torch.from_numpy(np.asarray(two_hop[u].multiply(adjacency[v]).sum(axis=1)).ravel())

    schema = ds.manifest.hetero
    tail = schema.type_named(
        next(r.tail for r in schema.relations if r.key == ds.manifest.link_split["target_relation"])
    )
    positives = ds.array(link_array("test"))
    pos, neg = score(positives), score(ds.array(link_array("test", negative=True)))
    tails = mrr_tails("test", positives, tail.count) + tail.offset
    heads = positives[:, :1].expand_as(tails)
    tail_scores = score(torch.stack([heads.reshape(-1), tails.reshape(-1)], dim=1)).view_as(tails)
    return {"test_auc": auc(pos, neg), "test_mrr": mrr(pos, tail_scores), "test_hits@50": hits_at_k(pos, neg, HITS_K)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--relation", default="paper-has_subject-subject")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--via", choices=("job", "example"), default="job", help="the built-in job or the example")
    parser.add_argument("--flags", default="", help="more flags of examples/hetero_link.py (--via example)")
    parser.add_argument("--root", type=Path, help="where to prepare (default: a temporary directory)")
    args = parser.parse_args()
    print(machine_info(torch.get_num_threads()))
    root = args.root or Path(tempfile.mkdtemp(prefix="gt-heterolink-"))
    ds = prepare(args.relation, root)
    split = ds.manifest.link_split
    print(f"ACM, target {args.relation}: split {split['sizes']}, negatives {split['eval_negatives']}")
    if args.via == "job":
        metrics, took, command = graphtier_job("acm-link", root, args.epochs, args.ranks, JOB_FLAGS)
    else:
        metrics, took, command = hetero_link_job(root, args.epochs, args.ranks, args.flags.split())
    heuristic = path_adamic_adar(ds)
    print(f"{'method':60s} {'test AUC':>9s} {'MRR':>7s} {'Hits@50':>8s}")
    print(f"{'graphtier R-GCN (' + command + ')':60s} {metrics['test_auc']:9.4f} {metrics['test_mrr']:7.4f} "
          f"{metrics['test_hits@50']:8.4f}   {took:.0f} s, best epoch {metrics.get('epoch', '-')}")  # fmt: skip
    print(f"{'Adamic-Adar over 3-hop paths (training graph)':60s} {heuristic['test_auc']:9.4f} "
          f"{heuristic['test_mrr']:7.4f} {heuristic['test_hits@50']:8.4f}")  # fmt: skip
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
