"""A session given a job's outputs writes its curves (history.csv, TensorBoard events) and, when training
finishes, the best epoch's weights as its exported model -- also across a resume from a checkpoint,
which keeps the earlier epochs' records and best weights and shows each epoch once in TensorBoard."""

from __future__ import annotations

import csv

import torch

from graphtier.contract.jobs.artifact import ModelConfig, read_manifest
from graphtier.contract.jobs.directory import checkpoint_dir, history_csv_path, tensorboard_dir
from graphtier.launcher.runtime import LocalBatchSource, TrainConfig
from graphtier.launcher.runtime.checkpoint import latest_checkpoint, load_checkpoint
from graphtier.launcher.runtime.exported_model import JobOutputs, load_model
from graphtier.launcher.runtime.objectives import NodeClassification
from graphtier.launcher.runtime.train_loop import train


def _train(source: LocalBatchSource, job_dir, epochs: int):
    config = TrainConfig(
        model="sage", in_dim=source.feature_dim, num_classes=source.num_classes, hidden=16, layers=2, lr=0.01,
        epochs=epochs, checkpoint_dir=checkpoint_dir(job_dir), seed=0,
    )  # fmt: skip
    model = ModelConfig(builtin=True, kind="sage", in_dim=source.feature_dim, hidden=16, out_dim=source.num_classes)
    model = model.model_copy(update={"layers": 2, "dropout": config.dropout})
    outputs = JobOutputs(job_dir, "t", None, model)
    return train(source.epoch_batches, NodeClassification(source.eval_batches), config, outputs=outputs)


def test_curves_and_the_best_weights_survive_a_resume(small_rmat, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    source = LocalBatchSource(small_rmat, [5, 5], 256, seed=0)
    first = _train(source, tmp_path, epochs=2)
    _, payload = load_checkpoint(latest_checkpoint(checkpoint_dir(tmp_path)))
    kept = payload["extra"]["best"]  # the best weights travel in the checkpoint, for a resumed job to export
    assert kept["weights_epoch"] == kept["epoch"] == first.best_epoch
    assert kept["weights"].keys() == first.model.state_dict().keys()
    resumed = _train(source, tmp_path, epochs=4)  # resumes from the end of epoch 1
    assert resumed.resumed_position is not None and resumed.resumed_position.epoch == 2

    with open(history_csv_path(tmp_path)) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2, 3]  # the first run's epochs kept
    assert [float(r["val_accuracy"]) for r in rows[:2]] == [
        first.history[i].record.metrics["val_accuracy"] for i in (1, 3)
    ]
    events = EventAccumulator(str(tensorboard_dir(tmp_path)))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [0, 1, 2, 3]  # each epoch once

    manifest = read_manifest(tmp_path / "artifact")
    assert manifest.figures.best_epoch == resumed.best_epoch == manifest.figures.weights_epoch
    assert manifest.figures.best["val_accuracy"] == resumed.best_eval["val"]
    # the exported weights are the best epoch's: evaluated again, they give its figures
    model = load_model(tmp_path / "artifact")
    correct = labelled = 0
    for batch in source.eval_batches("val"):
        with torch.no_grad():
            logits = model(batch.blocks, batch.x)[: batch.num_seeds]
        mask = batch.y >= 0
        correct += int((logits.argmax(1) == batch.y)[mask].sum())
        labelled += int(mask.sum())
        batch.release()
    assert correct / labelled == resumed.best_eval["val"]
