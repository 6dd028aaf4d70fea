"""The train loop in one process: every built-in model learns from the graph, checkpoints
resume exactly, progress is reported, and bad configurations are refused."""

from __future__ import annotations

import time

import pytest
import torch
from conftest import train_mlp_on_features
from pydantic import ValidationError

from graphtier.contract.errors import GraphtierError
from graphtier.launcher.runtime import LocalBatchSource, TrainConfig, TrainProgress, run_training


def _config(source, **overrides) -> TrainConfig:
    values = dict(
        model="sage",
        in_dim=source.feature_dim,
        num_classes=source.num_classes,
        hidden=64,
        layers=2,
        lr=0.01,
        dropout=0.2,
        epochs=8,
        eval_every_epochs=0,
        seed=1,
    )
    values.update(overrides)
    return TrainConfig(**values)


@pytest.mark.parametrize("model, lr", [("sage", 0.01), ("gcn", 0.01), ("gat", 0.005)])
def test_each_model_beats_the_features_alone(small_rmat, model, lr):
    baseline = train_mlp_on_features(small_rmat)
    source = LocalBatchSource(small_rmat, [10, 5], 64, seed=2)
    events: list[TrainProgress] = []
    result = run_training(source.epoch_batches, source.eval_batches, _config(source, model=model, lr=lr), events.append)
    test = result.final_eval["test"]
    assert test > baseline + 0.1, f"{model}: test accuracy {test:.3f} vs features alone {baseline:.3f}"
    assert result.steps == 8 * source.num_train_batches()
    kinds = [e.kind for e in events]
    assert kinds.count("epoch") == 8 and kinds.count("eval") == 1 and kinds[-1] == "done"
    steps = [e for e in events if e.kind == "step"]
    assert steps and all(e.loss > 0 and e.batches_per_second > 0 and 0 <= e.accuracy <= 1 for e in steps)
    first, last = events[kinds.index("epoch")], [e for e in events if e.kind == "epoch"][-1]
    assert last.loss < first.loss


def test_resuming_from_an_epoch_checkpoint_reproduces_uninterrupted_training(small_rmat, tmp_path):
    source = LocalBatchSource(small_rmat, [5, 5], 100, seed=3)
    straight = run_training(source.epoch_batches, None, _config(source, epochs=3, dropout=0.0))
    first = run_training(source.epoch_batches, None, _config(source, epochs=2, dropout=0.0, checkpoint_dir=tmp_path))
    assert first.resumed_from is None and first.last_checkpoint == tmp_path / f"ckpt-{first.steps:09d}.pt"
    resumed = run_training(source.epoch_batches, None, _config(source, epochs=3, dropout=0.0, checkpoint_dir=tmp_path))
    assert resumed.resumed_from == first.last_checkpoint
    assert (resumed.resumed_position.epoch, resumed.resumed_position.batch) == (2, 0)
    assert resumed.steps == straight.steps == 3 * source.num_train_batches()
    for key, value in straight.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[key], value, rtol=1e-5, atol=1e-6)
    done = run_training(source.epoch_batches, source.eval_batches, _config(source, epochs=3, checkpoint_dir=tmp_path))
    assert done.steps == resumed.steps and set(done.final_eval) == {"val", "test"}  # nothing left but evaluation


def test_mid_epoch_checkpoints_and_skipped_batches_are_released(small_rmat, tmp_path):
    source = LocalBatchSource(small_rmat, [5], 100, seed=3)
    released: list[int] = []

    def batches(epoch):
        for index, batch in enumerate(source.epoch_batches(epoch)):
            batch.release = lambda e=epoch, i=index: released.append((e, i))
            yield batch

    cfg = _config(source, layers=1, epochs=1, checkpoint_dir=tmp_path, checkpoint_every_steps=2, max_steps_per_epoch=3)
    result = run_training(batches, None, cfg)
    assert result.steps == 3 and released == [(0, 0), (0, 1), (0, 2), (0, 3)]  # the cut batch is released too
    (tmp_path / "ckpt-000000003.pt").unlink()  # back to the mid-epoch checkpoint: epoch 0, 2 batches done
    released.clear()
    resumed = run_training(batches, None, cfg.model_copy(update={"max_steps_per_epoch": None}))
    assert (resumed.resumed_position.batch, resumed.resumed_position.step) == (2, 2)
    assert resumed.steps == 2 + source.num_train_batches() - 2
    assert released == [(0, i) for i in range(source.num_train_batches())]


def test_any_module_with_the_block_signature_trains(small_rmat):
    class SeedsOnly(torch.nn.Module):
        def __init__(self, f: int, c: int) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(f, c)

        def forward(self, blocks, x):
            return self.lin(x[: blocks[-1].num_dst])

    source = LocalBatchSource(small_rmat, [3], 128)
    model = SeedsOnly(source.feature_dim, source.num_classes)
    before = model.lin.weight.detach().clone()
    reports = []
    result = run_training(
        source.epoch_batches, source.eval_batches, _config(source, layers=1, epochs=1), reports.append, model=model
    )
    assert result.model is model and not torch.equal(before, model.lin.weight)
    # Linear(f, c): f*c + c float32 parameters; after a step, as many gradient and Adam moment values,
    # plus Adam's step counter per parameter tensor.
    params = (source.feature_dim + 1) * source.num_classes * 4
    assert reports[-1].model_bytes == 4 * params + 2 * 4


def test_bad_configs_and_foreign_checkpoints_are_refused(small_rmat, tmp_path):
    source = LocalBatchSource(small_rmat, [3], 128)
    with pytest.raises(ValidationError, match="extra_forbidden"):
        _config(source, learning_rate=0.1)
    with pytest.raises(ValidationError, match="divisible by heads"):
        _config(source, model="gat", hidden=30, heads=4)
    with pytest.raises(ValidationError, match="greater than 0"):
        _config(source, lr=0)
    run_training(source.epoch_batches, None, _config(source, layers=1, epochs=1, hidden=8, checkpoint_dir=tmp_path))
    with pytest.raises(GraphtierError, match="checkpoint does not fit this model"):
        run_training(
            source.epoch_batches,
            None,
            _config(source, model="gcn", layers=1, epochs=2, hidden=8, checkpoint_dir=tmp_path),
        )
    with pytest.raises(GraphtierError, match="the model has 2 layers but got 1 blocks"):
        run_training(source.epoch_batches, None, _config(source, layers=2, epochs=1))


def test_the_best_epoch_is_the_first_highest_validation_and_survives_a_resume(tmp_path):
    """The session picks the best evaluation by `best_split` (ties: the earlier epoch; none without a
    validation figure), reports it with every evaluation, and keeps it in its checkpoints."""
    from torch import nn

    from graphtier.contract.evaluation import BestEvaluation
    from graphtier.launcher.runtime.distributed import DistContext
    from graphtier.launcher.runtime.session import TrainSession

    def session(config: TrainConfig, events: list[TrainProgress]) -> TrainSession:
        model = nn.Linear(2, 2)
        s = TrainSession(DistContext.from_env(), config, events.append)
        s.resume(model, torch.optim.Adam(model.parameters()))
        return s

    config = TrainConfig(in_dim=2, num_classes=2, epochs=4, checkpoint_dir=tmp_path)
    events: list[TrainProgress] = []
    node = session(config, events)
    for epoch, (val, test) in enumerate([(0.5, 0.4), (0.7, 0.6), (0.7, 0.9)]):
        node.record_evaluation(epoch, 1, {"val": val, "test": test})
    assert events[-1].best == BestEvaluation(1, "val_accuracy", 0.7, 0.6)  # the tie at epoch 2 keeps epoch 1
    node.checkpoint(node.position)
    resumed = session(config, [])  # a restart: the best of the epochs before it is kept
    resumed.record_evaluation(3, 1, {"val": 0.6, "test": 0.8})
    result = resumed.finish()
    assert (result.best_epoch, result.best_eval) == (1, {"val": 0.7, "test": 0.6})
    assert result.history[-1].kind == "done" and result.history[-1].best == BestEvaluation(1, "val_accuracy", 0.7, 0.6)

    # an epoch's end is checkpointed after its evaluation: a restart right after it keeps that epoch's figures
    ended = TrainConfig(in_dim=2, num_classes=2, epochs=2, eval_every_epochs=0, checkpoint_dir=tmp_path / "ended")
    first = session(ended, events := [])
    first.end_epoch(0, 1, lambda: pytest.fail("only the last epoch is due for an evaluation"))
    first.end_epoch(1, 1, lambda: first.record_evaluation(1, 1, {"val": 0.8, "test": 0.7}))
    assert [e.kind for e in events] == ["epoch", "epoch", "eval"]
    again = session(ended, [])
    assert again.position.epoch == 2 and again.best == BestEvaluation(1, "val_accuracy", 0.8, 0.7)

    link = session(TrainConfig(in_dim=2, num_classes=2, task="link", best_split="val_hits@50"), events := [])
    link.record_evaluation(0, 1, {"test_auc": 0.9})  # no validation edges: no best epoch
    assert events[-1].best is None and link.best_epoch is None
    link.record_evaluation(0, 1, {"val_hits@50": 0.3, "test_hits@50": 0.2})
    assert events[-1].best == BestEvaluation(0, "val_hits@50", metrics={"val_hits@50": 0.3, "test_hits@50": 0.2})


def test_an_epochs_rate_stops_when_its_batches_end_not_after_an_evaluation():
    """A script's own loop evaluates inside the epoch's body, before the epoch ends: its batches/s
    counts up to its last batch (Session.end_batches), as the built-in loop's does."""
    from graphtier.launcher.runtime.session import Window

    window = Window()
    for _ in range(4):
        window.add(1.0, 1, 2)
    window.stop()
    trained = window.summary()["batches_per_second"]
    time.sleep(0.2)  # an evaluation
    assert window.summary()["batches_per_second"] == trained
    window.stop()  # a second stop keeps the first
    assert window.summary()["batches_per_second"] == trained
    window.reset()
    window.add(1.0, 1, 2)
    time.sleep(0.05)
    running = window.summary()["batches_per_second"]
    time.sleep(0.05)
    assert window.summary()["batches_per_second"] < running  # not stopped: the rate keeps falling
