"""Embeddings of a node-classification job through scikit-learn's logistic regression (issue 36's check).

A daemon (in this process) trains GraphSAGE on Cora (its Planetoid split: 140
train, 500 val, 1000 test nodes; fanout 25,10, batch 64, hidden 256, 30 epochs, Adam 0.003, weight
decay 5e-4, dropout 0.5, 2 ranks), then `job predict` writes every node's embeddings over full
neighbourhoods in the source's ids, of both kinds: `hidden` (the last hidden layer) and `last-input`
(what the last layer's linear maps read: [h_v || mean_u h_u]). A logistic regression fitted on the
train nodes' embeddings (its regularisation the best of a few on the val nodes) classifies the test
nodes; its accuracy is compared with the job's own test accuracy -- of the epoch whose weights were
applied -- (target: within 0.02, held for `last-input`; `hidden`'s gap is reported beside it).

Run: python tests/bench/check_embedding_lr.py [--cora DIR] [--epochs 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from machine import run_job_to_end, write_figures

TARGET_GAP = 0.02
KINDS = ("hidden", "last-input")  # the embeddings measured
HELD = "last-input"  # the kind the verdict is of
REGULARISATION = (0.01, 0.1, 1.0, 10.0, 100.0)  # inverse strengths (C) tried; the best on the val nodes is kept
SHARED_CORA = Path(os.environ.get("GRAPHTIER_SHARED_DATASETS", "/work/shared/datasets")) / "planetoid_cora"


@dataclass(frozen=True)
class Figures:
    job_test_accuracy: float  # the job's own, at the epoch whose weights the embeddings are of
    lr_test_accuracy: dict[str, float]  # the logistic regression's on each kind of embeddings
    width: dict[str, int]  # each kind's columns
    predictions_test_accuracy: float  # the inference job's own predictions (its logits), full neighbourhoods
    epoch: int | None

    def gap(self, kind: str) -> float:
        return abs(self.lr_test_accuracy[kind] - self.job_test_accuracy)


def measure(cora: Path, root: Path, runtime: Path, *, epochs: int = 30, seed: int = 0) -> Figures:
    """Train, infer, fit the logistic regression (module docstring)."""
    import numpy as np

    from graphtier.contract.jobs.directory import job_directory, predictions_dir
    from graphtier.contract.jobs.spec import JobSpec
    from graphtier.launcher.client import DaemonClient
    from graphtier.launcher.runtime.inference_output import read_manifest, read_output
    from graphtier.service.daemon.config import DaemonConfig
    from graphtier.service.daemon.server import Daemon
    from graphtier.service.prepared import PrepareConfig, PreparedDataset, prepare_dataset

    if not (root / "cora-lr").exists():
        prepare_dataset(PrepareConfig(source=f"planetoid:{cora}", name="cora-lr", undirected=True, root=root))
    prepared = PreparedDataset.open("cora-lr", root)
    daemon = Daemon(DaemonConfig(runtime_dir=runtime, dataset_root=root))
    daemon.start()
    try:
        with DaemonClient(runtime_dir=runtime) as client:
            spec = JobSpec(
                dataset="cora-lr", fanouts=[25, 10], batch_size=64, hidden=256, epochs=epochs, lr=0.003,
                weight_decay=5e-4, dropout=0.5, nproc_per_node=2, seed=seed,
            )  # fmt: skip
            trained = run_job_to_end(client, spec)
            inferred = {
                kind: run_job_to_end(
                    client, JobSpec(dataset="cora-lr", from_job=trained.job_id, nproc_per_node=2, embeddings=kind)
                )
                for kind in KINDS
            }
    finally:
        daemon.stop()
    splits = ("train", "val", "test")
    rows = {name: prepared.source_ids(prepared.split(name)).numpy() for name in splits}  # the source's ids
    labels = {name: prepared.labels[prepared.split(name)].numpy() for name in splits}
    lr_accuracy, width, epochs = {}, {}, set()
    for kind, job in inferred.items():
        out = predictions_dir(job_directory(runtime, job.job_id))
        manifest, arrays = read_manifest(out), read_output(out)
        assert manifest.trained is not None and manifest.embeddings is not None
        assert manifest.embeddings.kind == kind
        epochs.add(manifest.trained.epoch)
        embeddings = np.asarray(arrays["embeddings"])
        assert np.array_equal(arrays["ids"], np.arange(prepared.manifest.num_nodes))  # row i is source node i
        lr_accuracy[kind], width[kind] = _probe(embeddings, rows, labels), manifest.embeddings.width
    (epoch,) = epochs
    best = trained.result.best
    job_test = best.test_accuracy if best is not None and best.epoch == epoch else trained.result.test_accuracy
    return Figures(job_test, lr_accuracy, width, inferred[HELD].result.test_accuracy, epoch)


def _probe(embeddings: object, rows: dict, labels: dict) -> float:
    """Test accuracy of a logistic regression fitted on the train nodes' embeddings, C chosen on the val nodes."""
    from sklearn.linear_model import LogisticRegression

    def fitted(c: float) -> LogisticRegression:
        return LogisticRegression(C=c, max_iter=5000).fit(embeddings[rows["train"]], labels["train"])

    def accuracy(classifier: LogisticRegression, split: str) -> float:
        return float((classifier.predict(embeddings[rows[split]]) == labels[split]).mean())

    # the regularisation chosen on the validation nodes, as a linear evaluation of embeddings does
    classifier = max((fitted(c) for c in REGULARISATION), key=lambda fit: accuracy(fit, "val"))
    return accuracy(classifier, "test")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cora", type=Path, default=SHARED_CORA, help="Cora in Planetoid's raw layout")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="also write the figures as JSON here")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="check-embedding-lr-") as work:
        f = measure(a.cora, Path(work) / "datasets", Path(work) / "run", epochs=a.epochs, seed=a.seed)
    probes = "; ".join(
        f"on {kind} embeddings ({f.width[kind]} columns) {f.lr_test_accuracy[kind]:.4f}, gap {f.gap(kind):.4f}"
        for kind in KINDS
    )
    print(
        f"job test accuracy {f.job_test_accuracy:.4f} (epoch {f.epoch}); logistic regression {probes} "
        f"(target <= {TARGET_GAP} on {HELD}); the inference job's own predictions "
        f"{f.predictions_test_accuracy:.4f}; load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    figures = [
        {
            "name": "logistic regression test accuracy - the job's",
            "value": f.gap(HELD),
            "unit": "",
            "target": TARGET_GAP,
            "better": "lower",
        },
        {"name": "logistic regression test accuracy", "value": f.lr_test_accuracy[HELD], "unit": ""},
        {"name": "job test accuracy", "value": f.job_test_accuracy, "unit": ""},
    ]
    for kind in KINDS:
        if kind != HELD:
            figures.append(
                {"name": f"logistic regression test accuracy - the job's, {kind}", "value": f.gap(kind), "unit": ""}
            )
    write_figures(a.json, "embedding_lr", figures)
    return 0 if f.gap(HELD) <= TARGET_GAP else 1


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
