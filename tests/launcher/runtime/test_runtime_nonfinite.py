"""`on_nonfinite` in the train loop: fail names rank and step (the loss, or the parameter whose gradient
is not finite); skip-step skips exactly the bad steps and leaves the weights finite, but refuses a run
that never trained; off checks nothing."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from graphtier.launcher.runtime import LocalBatchSource, TrainConfig, run_training
from graphtier.launcher.runtime.models.factory import build_model
from graphtier.launcher.runtime.nonfinite import NonFiniteError
from graphtier.service.prepared import PreparedDataset


def _with_nan_rows(small_rmat, tmp_path, rows) -> PreparedDataset:
    root = tmp_path / "datasets"
    shutil.copytree(small_rmat.directory, root / "rmat12")
    features = np.load(root / "rmat12" / "features.npy", mmap_mode="r+")
    features[rows] = np.nan
    features.flush()
    del features
    return PreparedDataset.open("rmat12", root)


def _config(source, **overrides) -> TrainConfig:
    values = dict(
        model="sage",
        in_dim=source.feature_dim,
        num_classes=source.num_classes,
        hidden=16,
        layers=2,
        lr=0.01,
        dropout=0.0,
        epochs=2,
        eval_every_epochs=0,
        seed=1,
    )
    return TrainConfig(**{**values, **overrides})


def test_fail_names_the_loss_rank_and_step(small_rmat, tmp_path):
    source = LocalBatchSource(_with_nan_rows(small_rmat, tmp_path, slice(None)), [5, 5], 64, seed=2)
    with pytest.raises(
        NonFiniteError, match=r"rank 0: the loss is nan at step 1 \(epoch 0, batch 1\).*on_nonfinite: fail"
    ):
        run_training(source.epoch_batches, None, _config(source))


def test_fail_names_the_parameter_whose_gradient_is_not_finite(small_rmat):
    source = LocalBatchSource(small_rmat, [5, 5], 64, seed=2)
    config = _config(source)
    model = build_model("sage", config.in_dim, config.hidden, config.num_classes, config.layers, 0.0, 1)
    name, param = list(model.named_parameters())[-1]
    calls = []

    def poison(grad):  # the third step's gradient of the last parameter turns infinite; its loss stays finite
        calls.append(1)
        return grad + float("inf") if len(calls) == 3 else grad

    param.register_hook(poison)
    with pytest.raises(NonFiniteError, match=rf"rank 0: the gradient of {name} is inf at step 3 \(epoch 0, batch 3\)"):
        run_training(source.epoch_batches, None, config, model=model)


def test_skip_step_skips_only_the_bad_steps_and_keeps_the_weights_finite(small_rmat, tmp_path, capfd):
    dataset = _with_nan_rows(small_rmat, tmp_path, slice(-30, None))  # the coldest rows: in some batches, not all
    source = LocalBatchSource(dataset, [5, 5], 32, seed=2)
    result = run_training(
        source.epoch_batches,
        source.eval_batches,
        _config(source, on_nonfinite="skip-step", epochs=3, eval_every_epochs=1),
    )
    said = capfd.readouterr().err
    skipped = said.count("skipped the optimizer step at step")
    assert result.steps == 3 * source.num_train_batches()
    assert 0 < skipped < result.steps, said[-2000:]
    assert "rank 0: skipped the optimizer step at step" in said and "(on_nonfinite: skip-step;" in said
    assert "steps skipped for a non-finite loss or gradient (on_nonfinite: skip-step)" in said
    assert all(bool(torch.isfinite(p).all()) for p in result.model.parameters())


def test_skip_step_refuses_a_run_that_never_trained(small_rmat, tmp_path):
    source = LocalBatchSource(_with_nan_rows(small_rmat, tmp_path, slice(None)), [5, 5], 256, seed=2)
    with pytest.raises(
        NonFiniteError, match=r"rank 0: all \d+ steps had a non-finite loss or gradient and were skipped"
    ):
        run_training(source.epoch_batches, None, _config(source, on_nonfinite="skip-step"))


def test_off_checks_nothing(small_rmat, tmp_path):
    source = LocalBatchSource(_with_nan_rows(small_rmat, tmp_path, slice(None)), [5, 5], 256, seed=2)
    result = run_training(source.epoch_batches, None, _config(source, on_nonfinite="off"))
    assert result.steps == 2 * source.num_train_batches()
    assert not all(bool(torch.isfinite(p).all()) for p in result.model.parameters())


def test_an_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="on_nonfinite"):
        TrainConfig(in_dim=4, num_classes=2, on_nonfinite="ignore")
