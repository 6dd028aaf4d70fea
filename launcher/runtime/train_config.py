"""The train loop's contract: `TrainConfig` in, `TrainProgress` reports out, `TrainResult` back.

`TrainConfig` is a validated pydantic model (extra fields refused): the loop's own settings
beside those of a job it shares with `JobSpec` by name (model, hidden, lr, epochs, ...), which
`TrainConfig.for_job` takes from the spec; the other two are plain dataclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from graphtier.contract.evaluation import BestEvaluation
from graphtier.contract.jobs.history import EpochRecord
from graphtier.contract.jobs.spec import DeviceKind, JobSpec
from graphtier.contract.link import DecoderKind, TaskKind
from graphtier.launcher.runtime.checkpoint import TrainPosition
from graphtier.launcher.runtime.models import ModelName
from graphtier.launcher.runtime.nonfinite import OnNonFinite


class TrainConfig(BaseModel):
    """Everything the loop needs besides the batches; validated, serialisable (job specs carry it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: ModelName = Field(
        "sage",
        description="built-in model: sage (GraphSAGE mean), gcn or gat; rgcn, rgat, hgt or preagg on a heterogeneous "
        "dataset",
    )
    in_dim: int = Field(ge=1, description="input feature width (the dataset manifest's feature_dim)")
    num_classes: int = Field(
        ge=2, description="output classes (the dataset manifest's num_classes); link: the embedding width"
    )
    hidden: int = Field(256, ge=1, description="hidden width (GAT: all heads together)")
    layers: int = Field(2, ge=1, description="GNN layers; must equal len(fanouts) of the sampler")
    heads: int = Field(4, ge=1, description="attention heads (GAT only)")
    dropout: float = Field(0.5, ge=0.0, lt=1.0, description="dropout before every layer (and on GAT attention)")
    lr: float = Field(0.003, gt=0.0, description="Adam learning rate")
    weight_decay: float = Field(0.0, ge=0.0, description="Adam L2 weight decay")
    embedding_lr: float | None = Field(
        None, gt=0.0, description="learning rate of featureless types' embeddings; None: a tenth of lr"
    )
    embedding_weight_decay: float = Field(
        0.0, ge=0.0, le=1.0, description="decoupled weight decay of featureless types' embeddings"
    )
    epochs: int = Field(1, ge=1, description="passes over the train ids")
    max_steps_per_epoch: int | None = Field(None, ge=1, description="cut every epoch after this many steps")
    seed: int = Field(0, description="seeds the model init (same on every rank) and dropout (per rank)")
    device: DeviceKind = Field("cpu", description="cpu (gloo) or cuda:LOCAL_RANK (NCCL)")
    checkpoint_dir: Path | None = Field(None, description="where rank 0 writes checkpoints; resume from the newest")
    checkpoint_every_steps: int = Field(0, ge=0, description="checkpoint every N optimizer steps (0: epoch ends only)")
    keep_checkpoints: int = Field(2, ge=1, description="newest checkpoints kept on disk")
    eval_every_epochs: int = Field(1, ge=0, description="evaluate every N epochs (0: only after the last)")
    eval_splits: tuple[str, ...] = Field(("val", "test"), description="splits evaluated, accuracy all-reduced")
    best_split: str = Field(
        "val",
        description="the evaluation key whose highest figure picks the best epoch (ties: the earlier): "
        "'val' (accuracy) or a link job's 'val_hits@50'",
    )
    log_every_steps: int = Field(10, ge=1, description="steps between 'step' progress reports")
    dist_timeout_s: float = Field(600.0, gt=0, description="timeout of torch.distributed collectives")
    task: TaskKind = Field("node", description="node classification, or link prediction (see objectives.py)")
    decoder: DecoderKind = Field("dot", description="link: how a pair is scored (dot, mlp, mlp+cn or mlp+cn+aa)")
    learned_embeddings: int = Field(
        0, ge=0, description="link: rows of a learned input embedding per node (a featureless graph); 0 = features"
    )
    on_nonfinite: OnNonFinite = Field(
        "fail",
        description="a NaN/inf loss or gradient: fail the job naming rank and step, skip-step, or off (unchecked)",
    )

    @classmethod
    def for_job(cls, spec: JobSpec, **loop: Any) -> TrainConfig:
        """The config of `spec`'s built-in loop: the spec's fields this config has too (model, hidden, lr,
        epochs, ...), then `loop`'s values (what the data and the rank decide: in_dim, layers, ...)."""
        shared = {name: getattr(spec, name) for name in cls.model_fields if name in JobSpec.model_fields}
        return cls(**{**shared, **loop})

    @model_validator(mode="after")
    def _check_heads(self) -> TrainConfig:
        if self.model == "gat" and self.hidden % self.heads:
            raise ValueError(f"hidden={self.hidden} must be divisible by heads={self.heads} for gat")
        return self


ProgressKind = Literal["step", "epoch", "eval", "done"]


@dataclass(frozen=True)
class TrainProgress:
    """One progress report. kind: 'step' (every log_every_steps), 'epoch', 'eval' or 'done'."""

    kind: ProgressKind
    rank: int
    world_size: int
    epoch: int
    step: int
    epochs: int
    batches_in_epoch: int
    loss: float | None = None  # mean training loss since the previous report
    accuracy: float | None = None  # training accuracy on the seeds since the previous report
    batches_per_second: float | None = None
    eval_accuracy: dict[str, float] = field(default_factory=dict)  # split -> accuracy ('eval', 'done')
    elapsed_s: float = 0.0
    model_bytes: int = 0  # parameters + gradients + optimizer state on this rank
    best: BestEvaluation | None = None  # the evaluation at the best validation figure so far ('eval', 'done')
    record: EpochRecord | None = None  # the epoch's record, job-wide ('epoch'; 'eval' once the epoch has one)


@dataclass
class TrainResult:
    """The trained model (unwrapped from DDP) and how training went."""

    model: nn.Module
    steps: int
    epochs_completed: int
    resumed_from: Path | None
    resumed_position: TrainPosition | None
    final_eval: dict[str, float]
    best_eval: dict[str, float]  # the evaluation with the highest best_split figure ({} when none had one)
    best_epoch: int | None
    history: list[TrainProgress]
    last_checkpoint: Path | None
