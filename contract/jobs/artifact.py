"""The exported model of a job (its artifact): the one description of its format, version 1.

A job that succeeds leaves `<job directory>/artifact/`, which `graphtier job export ID --out DIR`
copies from the daemon and `graphtier.loader.load_model(DIR)` loads:

    artifact.json   the manifest (`ArtifactManifest`, JSON): format version, job id, the model's
                    configuration, the dataset version it trained on, which weights these are and
                    the job's figures
    weights.pt      the model's `state_dict()` (`torch.save`), tensors on the CPU; its sha256 is in
                    the manifest and checked on load

The weights are those of the best epoch -- the one whose evaluation had the highest
`figures.selected_by` figure (the validation accuracy, a link job's val_hits@50), ties going to
the earlier epoch, as the job's `result.best` reports it -- or, when no evaluation had that
figure, of the last epoch (`figures.weights_epoch` says which). A featureless link graph's learned
input rows are in the weights; their row-wise Adam state is not (it only matters to training on).

`model.builtin` says whether `load_model` can rebuild the module: the built-in models (`kind`
sage, gcn, gat on one node type, rgcn, rgat, hgt or preagg on a heterogeneous graph, for `task` node or link) from the
configuration alone; a script's own module (`builtin` false) is named by `module` and its
weights load into that class (`torch.load(weights)` then `load_state_dict`).

A reader refuses a manifest of a newer format version; a change that old readers could misread
bumps `FORMAT_VERSION`. This module is torch-free: the weights are written and read by
`graphtier.launcher.runtime.exported_model`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from graphtier.contract.errors import GraphtierError
from graphtier.contract.hetero import FeaturelessInit, HeteroSchema
from graphtier.contract.jobs.spec import ModelKind
from graphtier.contract.link import DecoderKind, TaskKind
from graphtier.contract.messages import describe_validation_error

FORMAT_VERSION = 1
ARTIFACT_DIR = "artifact"  # in the job's directory
MANIFEST_FILE = "artifact.json"
WEIGHTS_FILE = "weights.pt"


class ArtifactError(GraphtierError):
    """An artifact that cannot be read: missing, of a newer format, or not matching its checksum."""


class ModelConfig(BaseModel):
    """Enough to rebuild a built-in model: what `build_model`, `build_hetero_model`, `LinkModel` and
    `HeteroLinkModel` are given when the job trains it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    builtin: bool = Field(description="a built-in model load_model rebuilds; false: the script's own module")
    module: str = Field("", description="a script's own model: its class (module.qualname); empty for a built-in")
    kind: ModelKind | None = Field(None, description="built-in: sage, gcn, gat, rgcn, rgat, hgt or preagg")
    task: TaskKind = Field("node", description="node classification, or link prediction (encoder + decoder)")
    in_dim: int = Field(0, ge=0, description="input width (a featureless link graph's: its learned rows' width)")
    hidden: int = Field(0, ge=0, description="hidden width (GAT: all heads together)")
    out_dim: int = Field(0, ge=0, description="node: classes; link: the embedding width")
    layers: int = Field(0, ge=0, description="GNN layers (sampled hops)")
    heads: int = Field(1, ge=1, description="attention heads (gat, rgat, hgt)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout while training (off in eval mode)")
    decoder: DecoderKind | None = Field(None, description="link: how a pair is scored")
    learned_embeddings: int = Field(0, ge=0, description="link on a featureless graph: rows of learned input")
    hetero: HeteroSchema | None = Field(None, description="a heterogeneous graph's schema; None: one node type")
    embedding_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="heterogeneous: dropout on learned embeddings")
    featureless_init: FeaturelessInit = Field(
        "zero", description="heterogeneous: featureless types' input (neighbour-mean: their means are in the weights)"
    )


class DatasetVersion(BaseModel):
    """The dataset version a job trained on, as the daemon identifies versions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str = Field(
        description="the prepared dataset's content version: a sha256 of what it holds and how it was prepared"
    )
    num_nodes: int = Field(ge=0)


class ArtifactFigures(BaseModel):
    """Which weights these are and how the job went."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights_epoch: int = Field(ge=0, description="the epoch (from 0) whose end the weights are from")
    best_epoch: int | None = Field(description="the best epoch; None when no evaluation had selected_by")
    selected_by: str = Field(description="the figure that picks the best epoch: val_accuracy or val_hits@50")
    best: dict[str, float] = Field(default_factory=dict, description="the evaluation at the best epoch")
    final: dict[str, float] = Field(default_factory=dict, description="the last evaluation")
    epochs: int = Field(ge=0, description="epochs trained")
    steps: int = Field(ge=0, description="optimizer steps taken")


class ArtifactManifest(BaseModel):
    """`artifact.json`; see the module docstring."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = Field(FORMAT_VERSION, ge=1)
    job_id: str
    created_at: datetime
    model: ModelConfig
    dataset: DatasetVersion | None = Field(description="None: trained outside a daemon's job")
    weights_file: str = WEIGHTS_FILE
    weights_sha256: str = Field(min_length=64, max_length=64)
    weights_bytes: int = Field(ge=0)
    figures: ArtifactFigures

    def describe(self) -> str:
        """One line for people, e.g. `sage (node), weights of epoch 12, the best by val_accuracy 0.7900`."""
        what = f"{self.model.kind} ({self.model.task})" if self.model.builtin else f"{self.model.module} (script)"
        f = self.figures
        if f.best_epoch is None:
            return f"{what}, weights of the last epoch ({f.weights_epoch}): no evaluation had {f.selected_by}"
        figure = f.best.get(f.selected_by)
        value = f" {figure:.4f}" if figure is not None else ""
        return f"{what}, weights of epoch {f.weights_epoch}, the best by {f.selected_by}{value}"


def artifact_dir(job_dir: Path) -> Path:
    """Where a job's artifact lives in its directory."""
    return Path(job_dir) / ARTIFACT_DIR


def now() -> datetime:
    return datetime.now(timezone.utc)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_manifest(path: Path) -> ArtifactManifest:
    """The manifest of the artifact at `path` (its directory or its artifact.json); ArtifactError
    naming the path when it is missing, unreadable or of a newer format."""
    path = Path(path)
    manifest = path / MANIFEST_FILE if path.is_dir() or not path.name.endswith(".json") else path
    try:
        text = manifest.read_text()
    except OSError as exc:
        raise ArtifactError(
            f"{manifest}: no exported model here ({exc.strerror}); export one with `graphtier job export ID --out DIR`"
        ) from None
    try:
        raw = ArtifactManifest.model_validate_json(text)
    except ValidationError as exc:
        version = _format_version(text)
        if version is not None and version > FORMAT_VERSION:
            raise ArtifactError(
                f"{manifest}: artifact format {version} is newer than this graphtier's ({FORMAT_VERSION}); "
                "upgrade graphtier to load it"
            ) from None
        raise ArtifactError(
            f"{manifest}: not a graphtier artifact manifest: {describe_validation_error(exc)}"
        ) from None
    if raw.format_version > FORMAT_VERSION:
        raise ArtifactError(
            f"{manifest}: artifact format {raw.format_version} is newer than this graphtier's ({FORMAT_VERSION}); "
            "upgrade graphtier to load it"
        )
    return raw


def _format_version(text: str) -> int | None:
    import json

    try:
        value = json.loads(text).get("format_version")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def weights_path(directory: Path, manifest: ArtifactManifest) -> Path:
    """The weights file of the artifact in `directory`, checked against the manifest's size and sha256."""
    path = Path(directory) / manifest.weights_file
    if Path(manifest.weights_file).name != manifest.weights_file:
        raise ArtifactError(f"{directory / MANIFEST_FILE}: weights_file {manifest.weights_file!r} is not a file name")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ArtifactError(f"{path}: the artifact's weights are missing ({exc.strerror})") from None
    if size != manifest.weights_bytes or file_sha256(path) != manifest.weights_sha256:
        raise ArtifactError(
            f"{path}: the weights do not match the manifest ({size} bytes, expected {manifest.weights_bytes} with "
            f"sha256 {manifest.weights_sha256[:16]}...): the artifact is damaged or incomplete"
        )
    return path


def artifact_files(directory: Path) -> list[Path]:
    """The files of the artifact in `directory` in the order an export sends them (manifest last), after
    checking the manifest reads and names its weights."""
    manifest = read_manifest(directory)
    return [Path(directory) / manifest.weights_file, Path(directory) / MANIFEST_FILE]


def artifact_bytes(directory: Path) -> int:
    """Bytes of the files in `directory` (what the artifact holds on disk); 0 when it is gone."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += (Path(root) / name).lstat().st_size
            except OSError:
                continue
    return total


def write_manifest(directory: Path, manifest: ArtifactManifest) -> Path:
    """Write `artifact.json` into `directory` (whole or not at all)."""
    target = Path(directory) / MANIFEST_FILE
    partial = target.with_name(f".{MANIFEST_FILE}.{os.getpid()}")
    partial.write_text(manifest.model_dump_json(indent=2))
    os.replace(partial, target)
    return target


def remove_artifact(job_dir: Path) -> bool:
    """Remove the artifact of the job whose directory is `job_dir`, and nothing else: a symbolic link in
    its place is unlinked, never followed. True when something was removed."""
    path = artifact_dir(job_dir)
    if path.is_symlink() or path.is_file():
        path.unlink()
        return True
    if not path.is_dir():
        return False
    shutil.rmtree(path)  # rmtree does not follow symbolic links inside the tree
    return True
