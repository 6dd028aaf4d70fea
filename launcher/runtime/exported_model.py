"""A job's exported model on the torch side: snapshot the weights, write the artifact, load it back.

The format is `graphtier.contract.jobs.artifact`'s (the manifest, its version, the file names);
this module writes and reads the weights with torch and rebuilds the built-in models from a
`ModelConfig`, the way a job builds them: `build_model` (sage, gcn, gat), `build_hetero_model`
(rgcn, rgat, hgt), `LinkModel` with its decoder (and `NodeEmbeddings` for a featureless graph) or
`HeteroLinkModel`. `load_model` is `graphtier.loader.load_model`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.artifact import (
    ARTIFACT_DIR,
    WEIGHTS_FILE,
    ArtifactError,
    ArtifactFigures,
    ArtifactManifest,
    DatasetVersion,
    ModelConfig,
    file_sha256,
    now,
    read_manifest,
    weights_path,
    write_manifest,
)
from graphtier.launcher.runtime.link_model import TABLE_BUFFERS, LinkModel, NodeEmbeddings
from graphtier.launcher.runtime.models import build_hetero_model, build_model
from graphtier.launcher.runtime.models.featureless import FeaturelessOptions, row_state_names

# a featureless graph's learned rows keep their row-wise Adam state beside them: training state, not the model's
OPTIMIZER_BUFFERS = tuple(f"embeddings.{name}" for name in TABLE_BUFFERS if name != "weight")


@dataclass(frozen=True)
class JobOutputs:
    """What a job's session writes besides checkpoints: where (the job's directory: its curves, and its
    artifact when it succeeds), for which job and dataset version, and the model's configuration (None:
    the trained module is the script's own)."""

    directory: Path
    job_id: str
    dataset: DatasetVersion | None
    model: ModelConfig | None = None


def snapshot(module: nn.Module) -> dict[str, Tensor]:
    """A CPU copy of `module`'s state (DDP looked through), without a learned table's optimizer state."""
    module = getattr(module, "module", module) if isinstance(module, nn.parallel.DistributedDataParallel) else module
    left_out = {*OPTIMIZER_BUFFERS, *row_state_names(module)}
    return {
        name: value.detach().to("cpu", copy=True) for name, value in module.state_dict().items() if name not in left_out
    }


def script_model(module: nn.Module) -> ModelConfig:
    """The configuration of a module the job's script built itself: its class, to load its weights into."""
    kind = type(module)
    return ModelConfig(builtin=False, module=f"{kind.__module__}.{kind.__qualname__}")


def write_artifact(
    outputs: JobOutputs,
    weights: dict[str, Tensor],
    model: ModelConfig,
    figures: ArtifactFigures,
) -> Path:
    """Write `<job directory>/artifact/` whole: into a sibling directory first, then renamed into place
    (an earlier one of the same job replaced), so a reader never sees half of one."""
    final = Path(outputs.directory) / ARTIFACT_DIR
    partial = final.with_name(f".{ARTIFACT_DIR}.{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True)
        weights_file = partial / WEIGHTS_FILE
        torch.save(weights, weights_file)
        manifest = ArtifactManifest(
            job_id=outputs.job_id,
            created_at=now(),
            model=model,
            dataset=outputs.dataset,
            weights_sha256=file_sha256(weights_file),
            weights_bytes=weights_file.stat().st_size,
            figures=figures,
        )
        write_manifest(partial, manifest)
        if final.is_symlink() or final.is_file():
            final.unlink()
        elif final.exists():
            shutil.rmtree(final)
        os.replace(partial, final)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise GraphtierError(f"{final}: cannot write the job's exported model ({exc.strerror or exc})") from None
    return final


def build_from_config(config: ModelConfig) -> nn.Module:
    """The built-in model `config` describes, freshly initialised; GraphtierError for a script's own."""
    if not config.builtin or config.kind is None:
        raise GraphtierError(
            f"the exported model is the job script's own {config.module or 'module'}: build it as the script does "
            f"and load the weights into it (torch.load(DIR/{WEIGHTS_FILE}) then load_state_dict)"
        )
    if config.task == "link":
        if config.hetero is not None:
            from graphtier.launcher.runtime.hetero_link import HeteroLinkModel

            return HeteroLinkModel(
                config.hetero,
                config.hidden,
                config.layers,
                model=config.kind,
                decoder=config.decoder or "dot",
                dropout=config.dropout,
                heads=config.heads,
                featureless=featureless_options(config),
            )
        model = LinkModel(
            config.kind,
            config.in_dim,
            config.hidden,
            config.layers,
            decoder=config.decoder or "dot",
            dropout=config.dropout,
            heads=config.heads,
        )
        if config.learned_embeddings:
            model.embeddings = NodeEmbeddings(config.learned_embeddings, config.hidden, lr=0.0)
        return model
    if config.hetero is not None:
        return build_hetero_model(
            config.kind,
            config.hetero,
            config.hidden,
            config.out_dim,
            config.layers,
            config.dropout,
            config.heads,
            featureless_options(config),
        )
    return build_model(
        config.kind, config.in_dim, config.hidden, config.out_dim, config.layers, config.dropout, config.heads
    )


def featureless_options(config: ModelConfig) -> FeaturelessOptions:
    """How a heterogeneous model's featureless types enter it, as the job trained it."""
    return FeaturelessOptions(init=config.featureless_init, dropout=config.embedding_dropout)


def read_weights(path: Path, manifest: ArtifactManifest | None = None) -> dict[str, Tensor]:
    """The weights of the artifact at `path` (its directory), checked against its manifest, on the CPU."""
    directory = Path(path)
    manifest = manifest or read_manifest(directory)
    file = weights_path(directory, manifest)
    try:
        state: Any = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds for a file it cannot read
        raise ArtifactError(f"{file}: cannot read the weights ({exc})") from None
    if not isinstance(state, dict):
        raise ArtifactError(f"{file}: expected a state dict, found {type(state).__name__}")
    return state


def load_model(path: str | Path, device: str | torch.device = "cpu") -> nn.Module:
    """The built-in model a job exported (`graphtier job export ID --out DIR`), rebuilt from the artifact's
    configuration with its weights (the best epoch's: see `read_manifest(DIR).figures`), on `device`
    ("cpu", "cuda", "cuda:1"), in eval mode. Node and link models, one node type or heterogeneous graphs.
    ArtifactError naming the path when the artifact is missing, damaged or of a newer format."""
    directory = Path(path)
    if directory.is_file():
        directory = directory.parent
    manifest = read_manifest(directory)
    model = build_from_config(manifest.model)
    state = read_weights(directory, manifest)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [name for name in missing if name not in OPTIMIZER_BUFFERS]
    if missing or unexpected:
        raise ArtifactError(
            f"{directory}: the weights do not fit the model its manifest describes (missing {missing[:5]}, "
            f"unexpected {list(unexpected)[:5]})"
        )
    return model.to(torch.device(device)).eval()
