"""The model a job trained, rebuilt for inference: `load_trained_model(job_dir, device)`.

A succeeded job leaves its exported model in its directory (`graphtier.contract.jobs.artifact`:
the weights of its best validation epoch and the model's configuration); this rebuilds the built-in
module from it (`exported_model.build_from_config`) in evaluation mode. A featureless link job's
learned input rows come back as a plain tensor (`embeddings`), not as the shared table training keeps
(whose making is a collective of every rank: inference only reads the rows).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.artifact import ModelConfig, artifact_dir, read_manifest, weights_path
from graphtier.contract.jobs.directory import job_spec_path
from graphtier.contract.jobs.spec import JobSpec
from graphtier.launcher.runtime.exported_model import build_from_config, read_weights

_EMBEDDINGS_PREFIX = "embeddings."


@dataclass(frozen=True)
class TrainedModel:
    """A job's trained model in eval mode, and where it came from."""

    module: nn.Module
    spec: JobSpec  # the training job's
    config: ModelConfig
    epoch: int  # the epoch (from 0) whose weights these are: the best validation one, else the last
    file: Path
    sha256: str
    dataset_version: str | None  # of the dataset the job trained on; None: not recorded
    embeddings: Tensor | None = None  # a featureless link job's learned input rows [num_nodes, hidden]


def load_trained_model(job_dir: Path, device: torch.device) -> TrainedModel:
    """Job `job_dir`'s exported model on `device`, in eval mode; GraphtierError naming what is missing."""
    job_dir = Path(job_dir)
    try:
        spec = JobSpec.model_validate_json(job_spec_path(job_dir).read_text())
    except OSError as exc:
        raise GraphtierError(f"{job_dir}: no readable job spec ({exc.strerror})") from None
    directory = artifact_dir(job_dir)
    manifest = read_manifest(directory)
    config = manifest.model
    if not config.builtin:
        raise GraphtierError(
            f"job {job_dir.name} trained its script's own model ({config.module}): infer in the script with "
            "job.layerwise()"
        )
    module = build_from_config(config.model_copy(update={"learned_embeddings": 0}))
    state = read_weights(directory, manifest)
    embeddings = state.get(f"{_EMBEDDINGS_PREFIX}weight")
    state = {name: value for name, value in state.items() if not name.startswith(_EMBEDDINGS_PREFIX)}
    try:
        module.load_state_dict(state)
    except RuntimeError as exc:
        raise GraphtierError(f"{directory}: its weights do not fit job {job_dir.name}'s model ({exc})") from None
    module.to(device).eval()
    return TrainedModel(
        module=module,
        spec=spec,
        config=config,
        epoch=manifest.figures.weights_epoch,
        file=weights_path(directory, manifest),
        sha256=manifest.weights_sha256,
        dataset_version=manifest.dataset.version if manifest.dataset is not None else None,
        embeddings=embeddings.float() if embeddings is not None else None,
    )
