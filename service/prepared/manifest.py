"""The manifest of a prepared dataset: format version, shapes, dtypes, checksums, score.

It is the one file a reader trusts first; every array file it lists is checked against
its recorded shape and dtype on open, and against its sha256 on `verify`.
"""

from __future__ import annotations

import hashlib
import json

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.hetero import HeteroSchema

FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"

# Array files of a prepared dataset, all `.npy` so they can be memory-mapped.
ARRAY_NAMES = (
    "colptr",  # int64 [N+1], CSC in the reordered id space
    "row",  # int64 [E], in-neighbour (source) ids, reordered space
    "features",  # float32 [N, F], row i = node i of the reordered space
    "labels",  # int64 [N], -1 = unlabelled
    "train_ids",  # int64, reordered ids
    "val_ids",
    "test_ids",
    "new_to_old",  # int64 [N]: source id of reordered node i
    "old_to_new",  # int64 [N]: reordered id of source node j
    "scores",  # float64 [N], in reordered order (non-increasing)
)
# A heterogeneous dataset (manifest `hetero` set) adds `edge_type` (int16 [E], relation of each CSC entry)
# and `features.<type>` (float32 [count, F_t], type-local reordered rows) per featured type;
# it has no global `features` array (types differ in width).
HETERO_ARRAYS = ("edge_type",)
OPTIONAL_ARRAYS = ("features", "labels", "original_ids")
# With an edge split (`link_split` set): int64 [n, 2] node pairs, reordered space (see edge_split.py):
# link_train, link_val, link_test (positives) and link_val_neg, link_test_neg (the negative pools).


class ArrayInfo(BaseModel):
    """One array file: where it is, what it holds, and its checksum."""

    model_config = ConfigDict(extra="forbid")

    file: str
    shape: list[int]
    dtype: str
    nbytes: int = Field(ge=0)
    sha256: str
    blake3: str | None = Field(
        None,
        description="BLAKE3 of the file, checked by the daemon while loading; None in "
        "datasets prepared before it was recorded (the load then checks sha256)",
    )


class DatasetManifest(BaseModel):
    """Everything needed to open, verify and describe a prepared dataset."""

    model_config = ConfigDict(extra="forbid")

    format_version: int = FORMAT_VERSION
    name: str
    created_at: str
    source: str = Field(description="the SOURCE argument of `dataset prepare`")
    source_description: dict[str, object] = Field(default_factory=dict)
    undirected: bool
    num_nodes: int = Field(ge=1)
    num_edges: int = Field(ge=0)
    feature_dim: int = Field(ge=0, description="0 when the source has no features")
    num_classes: int = Field(ge=0, description="0 when the source has no labels")
    class_labels: list[int] | None = Field(
        None,
        description="the source's label of each class 0..num_classes-1 when prepare remapped the labels to dense "
        "classes (labels.npy holds the classes); None: labels.npy holds the source's labels",
    )
    split_sizes: dict[str, int]
    score: dict[str, object] = Field(description="the ScoreSpec used, plus its label")
    arrays: dict[str, ArrayInfo]
    timings_s: dict[str, float] = Field(default_factory=dict)
    peak_rss_bytes: int = Field(0, description="peak resident memory of the preparing process")
    memory_budget_bytes: int | None = Field(
        None, description="the memory budget it was prepared under; None: the unbounded in-memory path"
    )
    preparation: dict[str, object] = Field(
        default_factory=dict, description="how: path, peak memory after each step, chunks and spill per step"
    )
    notes: list[str] = Field(
        default_factory=list, description="what prepare noticed about the source (printed by the CLI)"
    )
    hetero: HeteroSchema | None = Field(
        None, description="node types, relations and target type of a heterogeneous graph; None: a homogeneous graph"
    )
    link_split: dict[str, object] | None = Field(
        None,
        description="the edge split for link prediction (shares, seed, sizes, negative pools, whether node "
        "inputs are features or learned embeddings); None: no edge split",
    )

    @property
    def learned_embeddings(self) -> bool:
        """A featureless dataset's link-prediction jobs learn an embedding per node instead."""
        return self.feature_dim == 0

    @property
    def feature_row_bytes(self) -> int:
        return self.feature_dim * 4

    @property
    def total_bytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


def content_version(manifest: DatasetManifest) -> str:
    """The version of a prepared dataset (sha256 hex): a hash of what it holds -- every array's sha256,
    shape and dtype -- and of the preparation's parameters that shape it (format, undirected, score,
    classes), never of the manifest's bytes, which hold timings, dates and paths. The same source
    prepared with the same parameters, twice or on two machines, is one version."""
    content = {
        "format_version": manifest.format_version,
        "undirected": manifest.undirected,
        "num_nodes": manifest.num_nodes,
        "num_edges": manifest.num_edges,
        "feature_dim": manifest.feature_dim,
        "num_classes": manifest.num_classes,
        "class_labels": manifest.class_labels,
        "score": {key: value for key, value in manifest.score.items() if key != "label"},
        "arrays": {
            name: {"sha256": info.sha256, "shape": list(info.shape), "dtype": info.dtype}
            for name, info in sorted(manifest.arrays.items())
        },
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()
