"""What an inference job writes (`predictions/`) and a link job's kept test scores
(`link-scores/`): npy arrays in the source's ids, described by a manifest.

An inference job's output is one group of arrays per node type (`node` on a graph with one type),
each array split into one shard per rank (`<group>/<array>.<shard>.npy`, shard k holding rows
[first_row, first_row + rows) of the whole array). Every group has `ids`: the source's id of
each row (on a heterogeneous graph the type's own ids). Rows are in the source's order -- row i of
every node of a Cora-like source is node i -- or in the order of the id file the job was given.
Arrays: `embeddings` (`EmbeddingKind`: the last hidden layer, or what the last layer's linear maps
read), `logits` and `predictions` (node classification: the class of each row, in the source's
labels), a link model's `embeddings` (the encoder's output, what its decoder scores pairs from).

A link job's test scores: the positives' scores with their pairs, the split's negative pool
(Hits@K) and each positive's corrupted tails (MRR), all pairs in the source's ids, and the
figures the job reported from them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MANIFEST_FILE = "manifest.json"
DEFAULT_CHUNK = 4096  # destination nodes per chunk of a layer: large enough for dense kernels, small enough for memory
HOMOGENEOUS_GROUP = "node"  # the one group of a graph with one node type

# Which rows an inference job writes as a node's embeddings: `hidden`, the last hidden layer (post-activation);
# `last-input`, what the last layer's linear maps read -- the node's last hidden row beside its neighbours'
# aggregate of it (GraphSAGE [h_v || mean_u h_u], GCN the normalised aggregate, GAT each head's attention-weighted
# sum of the sources' rows, R-GCN [h_v || each relation's mean]), of which the logits are a linear function,
# as a CNN's penultimate features are; a model whose last step is a linear head over a hidden layer (HGT) reads
# that layer, the same rows as `hidden`.
EmbeddingKind = Literal["hidden", "last-input"]
DEFAULT_EMBEDDINGS: EmbeddingKind = "hidden"
# the node classifiers whose last layer `last-input` splits (R-GAT's sums one attention per relation: not split)
LAST_INPUT_MODELS = ("sage", "gcn", "gat", "rgcn", "hgt")


class ShardInfo(BaseModel):
    """One file of an array: rows [first_row, first_row + rows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file: str = Field(description="path relative to the manifest's folder")
    first_row: int = Field(ge=0)
    rows: int = Field(ge=0)


class ArrayInfo(BaseModel):
    """One output array, whole: its dtype and shape, and its shards in row order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dtype: str
    shape: list[int]
    shards: list[ShardInfo]


class OutputGroup(BaseModel):
    """The arrays of one node type, every one with the same rows."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rows: int = Field(ge=0)
    arrays: dict[str, ArrayInfo]


class TrainedModelInfo(BaseModel):
    """Which trained weights an inference job applied."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = Field(description="the job that trained them")
    model: str = Field(description="sage, gcn, gat, rgcn, rgat, hgt or preagg")
    task: str = Field(description="node or link")
    layers: int
    hidden: int
    epoch: int = Field(description="the epoch (from 0) the weights are of: its best validation epoch, else its last")
    file: str = Field(description="the file the weights were read from (its exported model's)")
    sha256: str = Field(description="of that file")


class EmbeddingsInfo(BaseModel):
    """Which rows the output's `embeddings` are (`EmbeddingKind`) and how many columns they have."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: EmbeddingKind
    width: int = Field(ge=1)


class PredictionManifest(BaseModel):
    """`predictions/manifest.json` in the job's directory (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    dataset: str
    dataset_version: str = Field(description="the prepared dataset's content version (`dataset_version`)")
    trained: TrainedModelInfo | None = Field(description="the built-in model applied; None: a script's own")
    rows: str = Field(description="'every node' (in the source's order) or the id file's path (in its order)")
    groups: dict[str, OutputGroup] = Field(description="by node type; `node` on a graph with one type")
    class_labels: list[int] | None = Field(
        None, description="the source's label of each logit column when prepare remapped them; None: the same"
    )
    embeddings: EmbeddingsInfo | None = Field(
        None, description="what the `embeddings` arrays hold; None: no embeddings, or a script's own arrays"
    )
    seconds: float = Field(0.0, description="wall time of the layer-wise pass and the writing")


class LinkScores(BaseModel):
    """`link-scores/manifest.json` in the job's directory: which arrays hold what, and the figures the job reported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    split: str = "test"
    epoch: int = Field(description="the evaluation (epoch, from 0) the scores are of: the best validation one")
    hits_k: int
    metrics: dict[str, float] = Field(description="the job's own figures from these scores (test_hits@K, test_mrr)")
    arrays: dict[str, str] = Field(
        description="file of each array: positive_scores [P], positive_pairs [P, 2], negative_scores [N], "
        "negative_pairs [N, 2], tail_scores [P, T], tails [P, T] (each positive's MRR tails; the head is its own)"
    )
