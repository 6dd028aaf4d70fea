"""The model a job trained, rebuilt for inference: `load_trained_model(job_dir, schema, device)`.

The weights are read from the file `trained_model_file` names in the job's directory and the model
rebuilt from the configuration saved beside them (the train loop's `TrainConfig`) and the job's
spec: a built-in node classifier (sage, gcn, gat; rgcn or hgt on a typed dataset), or a link
job's encoder and decoder (`LinkModel`, `TypedLinkModel`). A featureless link job's learned input
rows come back as a plain tensor (`embeddings`), not as the shared table training keeps.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import HeteroSchema
from graphtier.contract.jobs.directory import job_spec_path, trained_model_file
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.runtime.checkpoint import load_checkpoint
from graphtier.launcher.runtime.link_model import LinkModel
from graphtier.launcher.runtime.models import build_model, build_typed_model
from graphtier.launcher.runtime.train_config import TrainConfig
from graphtier.launcher.runtime.typed_link import TypedLinkModel

_EMBEDDINGS_PREFIX = "embeddings."


@dataclass(frozen=True)
class TrainedModel:
    """A job's trained model in eval mode, and where it came from."""

    module: nn.Module
    spec: JobSpec  # the training job's
    config: TrainConfig
    epoch: int | None  # the epoch (from 0) whose weights these are; None: not recorded
    file: Path
    sha256: str
    embeddings: Tensor | None = None  # a featureless link job's learned input rows [num_nodes, hidden]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_trained(spec: JobSpec, config: TrainConfig, schema: HeteroSchema | None) -> nn.Module:
    """The module `spec`'s job trained, fresh: its weights are loaded into it."""
    layers = config.layers
    if spec.task == "link":
        if schema is not None:
            return TypedLinkModel(
                schema, config.hidden, layers, model=spec.model, decoder=spec.decoder, dropout=0.0, heads=config.heads
            )
        in_dim = config.hidden if config.learned_embeddings else config.in_dim
        return LinkModel(
            config.model, in_dim, config.hidden, layers, decoder=config.decoder, dropout=0.0, heads=config.heads
        )
    if schema is not None:
        return build_typed_model(spec.model, schema, config.hidden, config.num_classes, layers, 0.0, config.heads)
    return build_model(config.model, config.in_dim, config.hidden, config.num_classes, layers, 0.0, config.heads)


def load_trained_model(job_dir: Path, schema: HeteroSchema | None, device: torch.device) -> TrainedModel:
    """Job `job_dir`'s trained model on `device`, in eval mode; GraphtierError naming what is missing."""
    job_dir = Path(job_dir)
    try:
        spec = JobSpec.model_validate_json(job_spec_path(job_dir).read_text())
    except OSError as exc:
        raise GraphtierError(f"{job_dir}: no readable job spec ({exc.strerror})") from None
    file = trained_model_file(job_dir)
    if file is None:
        raise GraphtierError(f"job {job_dir.name} left no trained model in {job_dir}")
    position, payload = load_checkpoint(file)
    extra = payload.get("extra", {})
    if not isinstance(extra.get("config"), dict):
        raise GraphtierError(f"{file}: holds no model configuration")
    config = TrainConfig.model_validate(extra["config"])
    module = build_trained(spec, config, schema)
    state = dict(payload["model"])
    embeddings = None
    table = {k: v for k, v in state.items() if k.startswith(_EMBEDDINGS_PREFIX)}
    if table:  # training's shared table of learned rows: only its weight is the model's
        embeddings = table[f"{_EMBEDDINGS_PREFIX}weight"].float()
        state = {k: v for k, v in state.items() if not k.startswith(_EMBEDDINGS_PREFIX)}
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        raise GraphtierError(f"{file}: its weights do not fit job {job_dir.name}'s model ({exc})") from None
    module.to(device).eval()
    epoch = max(position.epoch - 1, 0) if position.batch == 0 else position.epoch
    return TrainedModel(module, spec, config, epoch, file, _sha256(file), embeddings)
