"""`load_model` rebuilds every built-in model as a job builds it -- node and link, one node type or heterogeneous --
with the exported weights; a damaged, newer or script-own artifact is refused naming why."""

from __future__ import annotations

import json

import pytest
import torch

from graphtier.contract.hetero import HeteroSchema, NodeTypeInfo, RelationInfo
from graphtier.contract.jobs.artifact import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    WEIGHTS_FILE,
    ArtifactError,
    ArtifactFigures,
    DatasetVersion,
    ModelConfig,
    read_manifest,
)
from graphtier.launcher.runtime.exported_model import (
    OPTIMIZER_BUFFERS,
    JobOutputs,
    load_model,
    script_model,
    snapshot,
    write_artifact,
)
from graphtier.launcher.runtime.hetero_link import HeteroLinkModel
from graphtier.launcher.runtime.models import build_hetero_model
from graphtier.launcher.runtime.objectives import NodeClassification, build_link_model
from graphtier.launcher.runtime.train_config import TrainConfig

SCHEMA = HeteroSchema(
    node_types=[
        NodeTypeInfo(name="paper", count=30, offset=0, feature_dim=8),
        NodeTypeInfo(name="author", count=20, offset=30, feature_dim=0),
    ],
    relations=[
        RelationInfo(head="paper", name="cites", tail="paper", num_edges=10),
        RelationInfo(head="author", name="writes", tail="paper", num_edges=10),
        RelationInfo(head="paper", name="rev_writes", tail="author", num_edges=10, reverse_of="author-writes-paper"),
    ],
    target_type="paper",
)
FIGURES = ArtifactFigures(
    weights_epoch=3, best_epoch=3, selected_by="val_accuracy", best={"val_accuracy": 0.5}, epochs=5, steps=50
)


def _trained(config: ModelConfig) -> torch.nn.Module:
    """The model a job with `config` trains, built as the job builds it, its weights moved off their init."""
    torch.manual_seed(1)
    if config.task == "node" and config.hetero is None:
        train = TrainConfig(
            model=config.kind, in_dim=config.in_dim, num_classes=config.out_dim, hidden=config.hidden,
            layers=config.layers, heads=config.heads, dropout=config.dropout,
        )  # fmt: skip
        model = NodeClassification(None).build_model(train)
    elif config.task == "node":
        model = build_hetero_model(
            config.kind, SCHEMA, config.hidden, config.out_dim, config.layers, config.dropout, config.heads
        )
    elif config.hetero is None:
        train = TrainConfig(
            model=config.kind, in_dim=config.in_dim, num_classes=config.hidden, hidden=config.hidden,
            layers=config.layers, heads=config.heads, dropout=config.dropout, task="link", decoder=config.decoder,
            learned_embeddings=config.learned_embeddings,
        )  # fmt: skip
        model = build_link_model(train)
    else:
        model = HeteroLinkModel(
            SCHEMA, config.hidden, config.layers, model=config.kind, decoder=config.decoder, dropout=config.dropout,
            heads=config.heads,
        )  # fmt: skip
    with torch.no_grad():
        for value in model.state_dict().values():
            if value.is_floating_point():
                value.add_(torch.randn_like(value))
    return model


CONFIGS = {
    "sage node": ModelConfig(builtin=True, kind="sage", in_dim=8, hidden=16, out_dim=4, layers=2, dropout=0.5),
    "gat node": ModelConfig(builtin=True, kind="gat", in_dim=8, hidden=16, out_dim=4, layers=2, heads=4),
    "rgcn heterogeneous node": ModelConfig(builtin=True, kind="rgcn", hidden=16, out_dim=3, layers=2, hetero=SCHEMA),
    "rgat heterogeneous node": ModelConfig(
        builtin=True, kind="rgat", hidden=16, out_dim=3, layers=2, heads=2, hetero=SCHEMA
    ),
    "hgt heterogeneous node": ModelConfig(
        builtin=True, kind="hgt", hidden=16, out_dim=3, layers=2, heads=2, hetero=SCHEMA
    ),
    "preagg heterogeneous node": ModelConfig(
        builtin=True, kind="preagg", hidden=16, out_dim=3, layers=2, dropout=0.5, hetero=SCHEMA
    ),
    "gcn link mlp": ModelConfig(
        builtin=True, kind="gcn", task="link", in_dim=8, hidden=16, out_dim=16, layers=2, decoder="mlp"
    ),
    "sage link featureless mlp+cn+aa": ModelConfig(
        builtin=True,
        kind="sage",
        task="link",
        in_dim=16,
        hidden=16,
        out_dim=16,
        layers=2,
        decoder="mlp+cn+aa",
        learned_embeddings=40,
    ),  # fmt: skip
    "rgcn heterogeneous link": ModelConfig(
        builtin=True, kind="rgcn", task="link", hidden=16, out_dim=16, layers=2, decoder="dot", hetero=SCHEMA
    ),
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_load_model_rebuilds_the_trained_model_with_its_weights(config, tmp_path):
    trained = _trained(config)
    outputs = JobOutputs(tmp_path, "7", DatasetVersion(name="d", version="ab" * 32, num_nodes=50), config)
    directory = write_artifact(outputs, snapshot(trained), config, FIGURES)
    manifest = read_manifest(directory)
    assert (manifest.format_version, manifest.job_id, manifest.model, manifest.figures) == (
        FORMAT_VERSION,
        "7",
        config,
        FIGURES,
    )
    loaded = load_model(directory, device="cpu")
    assert type(loaded) is type(trained) and not loaded.training
    expected = {k: v for k, v in trained.state_dict().items() if k not in OPTIMIZER_BUFFERS}
    got = {k: v for k, v in loaded.state_dict().items() if k not in OPTIMIZER_BUFFERS}
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_a_damaged_newer_or_script_own_artifact_is_refused(tmp_path):
    config = CONFIGS["sage node"]
    outputs = JobOutputs(tmp_path, "7", None, config)
    directory = write_artifact(outputs, snapshot(_trained(config)), config, FIGURES)
    with open(directory / WEIGHTS_FILE, "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    with pytest.raises(ArtifactError, match="the weights do not match the manifest"):
        load_model(directory)
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    (directory / MANIFEST_FILE).write_text(json.dumps({**manifest, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ArtifactError, match=f"artifact format {FORMAT_VERSION + 1} is newer than this graphtier's"):
        load_model(directory)
    with pytest.raises(ArtifactError, match="no exported model here"):
        load_model(tmp_path / "nothing")

    own = torch.nn.Linear(3, 2)
    mine = write_artifact(JobOutputs(tmp_path / "script", "8", None), snapshot(own), script_model(own), FIGURES)
    assert read_manifest(mine).model.module == "torch.nn.modules.linear.Linear"
    with pytest.raises(Exception, match="the job script's own torch.nn.modules.linear.Linear"):
        load_model(mine)
