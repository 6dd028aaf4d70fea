"""The schema of a heterogeneous graph, shared by the data plane and the launcher.

A heterogeneous graph lives in one global node id space: node type t owns the contiguous ids
`[offset_t, offset_t + count_t)`, types in `node_types` order. Every relation
`head-name-tail` (edges head -> tail, messages flow head to tail) is a slice of one CSC over the
global ids: a column's entries are grouped by relation id, ascending, and `edge_type[e]` holds
the relation of entry e. One id space keeps every homogeneous piece (the CSC, the scores,
labels, splits, the sampler's node map, the slots) unchanged; the types are a prefix sum away.

Relation fanouts are written `head-name-tail:k,...` (one hop) or as one int for every relation;
on a command line hops are `10,5` (one int per hop, every relation) or, once relations are named,
separated by `;` (`paper-cites-paper:10,author-rev_written_by-paper:5;-1`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from graphtier.contract.errors import GraphtierError, SamplingError
from graphtier.contract.fanouts import MAX_FANOUT

FeaturelessInit = Literal["auto", "zero", "neighbour-mean"]  # how a featureless type's input starts (the jobs' option)
REVERSE_PREFIX = "rev_"  # a reverse relation of `name` is named `rev_<name>`
_NAME = re.compile(r"^[A-Za-z0-9_.]+$")


def relation_key(head: str, name: str, tail: str) -> str:
    """The canonical spelling of a relation: `head-name-tail` (`paper-written_by-author`)."""
    return f"{head}-{name}-{tail}"


def check_type_name(name: str, what: str) -> str:
    """`name` if it is usable as a node type or relation name (letters, digits, '_', '.')."""
    if not _NAME.match(name):
        raise ValueError(f"{what} {name!r} must use only letters, digits, '_' and '.'")
    return name


class NeighbourMean(BaseModel):
    """A featureless type's mean of its neighbours' features over one relation to a featured type,
    computed once at prepare: one row per node of the type (type-local, reordered as its ids)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    relation: str = Field(description="key of the relation joining the two types (either direction)")
    source_type: str = Field(description="the featured type whose rows are averaged")
    feature_dim: int = Field(ge=1, description="the source type's feature width")
    array: str = Field(description="array file of the means, [count, feature_dim] float32")


class NodeTypeInfo(BaseModel):
    """One node type: its id range in the global space and its features."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    count: int = Field(ge=0, description="nodes of this type")
    offset: int = Field(ge=0, description="first global id of this type")
    feature_dim: int = Field(ge=0, description="0: no input features; the model learns an embedding per node")
    feature_array: str | None = Field(None, description="array file of its feature rows (type-local, reordered)")
    neighbour_means: list[NeighbourMean] = Field(
        default_factory=list,
        description="a featureless type: its neighbours' mean features per relation to a "
        "featured type (empty: none, or prepared before they were computed)",
    )

    @property
    def featureless(self) -> bool:
        return self.feature_dim == 0

    @property
    def row_bytes(self) -> int:
        return self.feature_dim * 4


class RelationInfo(BaseModel):
    """One relation (edge type): its endpoints' types and whether prepare added it as a reverse."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    head: str
    name: str
    tail: str
    num_edges: int = Field(ge=0)
    reverse_of: str | None = Field(None, description="key of the relation this one reverses")

    @property
    def key(self) -> str:
        return relation_key(self.head, self.name, self.tail)


class HeteroSchema(BaseModel):
    """Node types, relations and the target type of a heterogeneous dataset (in its manifest)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    node_types: list[NodeTypeInfo]
    relations: list[RelationInfo] = Field(description="relation id = position in this list")
    target_type: str = Field(description="the node type that carries labels and the split")

    @property
    def num_nodes(self) -> int:
        return sum(t.count for t in self.node_types)

    def type_named(self, name: str) -> NodeTypeInfo:
        for info in self.node_types:
            if info.name == name:
                return info
        raise KeyError(name)

    def type_index(self, name: str) -> int:
        return [t.name for t in self.node_types].index(name)

    def offsets(self) -> list[int]:
        """`[offset_0, ..., offset_{T-1}, num_nodes]`: type t owns ids [offsets[t], offsets[t+1])."""
        return [t.offset for t in self.node_types] + [self.num_nodes]

    def relation_dst_types(self) -> list[int]:
        """The node type index of each relation's tail (the type it delivers messages to)."""
        index = {t.name: i for i, t in enumerate(self.node_types)}
        return [index[r.tail] for r in self.relations]

    def relation_fanouts(self, hops: Sequence[str | int]) -> list[list[int]]:
        """Per hop, one fanout per relation (relation-id order) from `parse_relation_fanouts` hops."""
        return [
            parse_relation_fanouts(hop, [r.key for r in self.relations], hop_number=i + 1) for i, hop in enumerate(hops)
        ]


def starts_from_neighbour_means(init: FeaturelessInit, info: NodeTypeInfo) -> bool:
    """Whether a featureless type's input starts from its neighbours' means: under neighbour-mean, or
    auto (the jobs' default), wherever the prepared dataset has means for it."""
    return init != "zero" and info.featureless and bool(info.neighbour_means)


def check_neighbour_means(schema: HeteroSchema) -> list[str]:
    """The featureless types that keep the zero start under neighbour-mean (no featured neighbour type);
    GraphtierError naming the types when none has means (nothing to initialise from)."""
    featureless = [t for t in schema.node_types if t.featureless]
    without = [t.name for t in featureless if not t.neighbour_means]
    if featureless and len(without) == len(featureless):
        featured = [t.name for t in schema.node_types if not t.featureless]
        why = (
            "no node type has features"
            if not featured
            else f"none has a relation to a featured type ({', '.join(featured)}), or the dataset was prepared "
            "before neighbour means were computed (prepare it again)"
        )
        raise GraphtierError(
            f"featureless_init neighbour-mean: featureless type(s) {', '.join(without)} have no neighbour means: "
            f"{why}; use featureless_init zero"
        )
    return without


def split_fanout_hops(text: str) -> list[str]:
    """A command line's heterogeneous fanout as one entry per hop (see the module docstring)."""
    text = text.strip()
    if not text:
        raise SamplingError("--fanout is empty; give e.g. 10,5 or 'head-rel-tail:10,...;...'")
    if ":" in text:
        return [hop.strip() for hop in text.split(";")]
    return [hop.strip() for hop in text.replace(";", ",").split(",")]


def hop_fanout_bound(hop: str | int, *, hop_number: int = 1) -> int:
    """The most neighbours one hop draws per relation (-1: all), read from the hop's text alone.

    `hop` is an int or `head-rel-tail:k,...`; the relations are not checked (the dataset knows
    them: `parse_relation_fanouts`). ValueError when the hop is malformed or expands nothing.
    """
    text = str(hop).strip()
    if isinstance(hop, int) or re.fullmatch(r"-?\d+", text):
        values = [int(text)]
    else:
        values = []
        for part in text.split(","):
            key, sep, value = part.strip().rpartition(":")
            if not sep or not key or not re.fullmatch(r"-?\d+", value.strip()):
                raise ValueError(f"hop {hop_number}: {part.strip()!r} is not 'head-relation-tail:k'")
            values.append(int(value))
    if any(k < -1 or k > MAX_FANOUT for k in values):
        raise ValueError(
            f"hop {hop_number}: fanout {text!r} is invalid; use -1 (all), 0 (skip a relation) or k from 1 to "
            f"{MAX_FANOUT}"
        )
    if -1 in values:
        return -1
    if max(values) < 1:
        raise ValueError(f"hop {hop_number}: {text!r} expands no relation")
    return max(values)


def parse_relation_fanouts(hop: str | int, relation_keys: Sequence[str], *, hop_number: int = 1) -> list[int]:
    """One hop's fanouts, one per relation: an int for every relation, or `key:k,key:k,...`.

    Relations a hop does not name are not expanded at that hop (fanout 0). A fanout is -1
    (all neighbours), 0 (skip the relation) or >= 1.
    """
    if isinstance(hop, bool):
        raise SamplingError(f"hop {hop_number}: fanout {hop!r} is not an int or 'relation:k' list")
    if isinstance(hop, int) or (isinstance(hop, str) and re.fullmatch(r"-?\d+", hop.strip())):
        k = int(hop)
        if k != -1 and not 1 <= k <= MAX_FANOUT:
            raise SamplingError(
                f"hop {hop_number}: fanout {k} is invalid; use -1 (all neighbours) or an int from 1 to {MAX_FANOUT}"
            )
        return [k] * len(relation_keys)
    fanouts = [0] * len(relation_keys)
    named: set[str] = set()
    for part in str(hop).split(","):
        key, sep, value = part.strip().rpartition(":")
        if not sep or not key:
            raise SamplingError(f"hop {hop_number}: {part!r} is not 'head-relation-tail:k'")
        if key not in relation_keys:
            raise SamplingError(
                f"hop {hop_number}: unknown relation {key!r}; the dataset's relations are {', '.join(relation_keys)}"
            )
        try:
            k = int(value)
        except ValueError:
            raise SamplingError(f"hop {hop_number}: fanout {value!r} of {key} is not an int") from None
        if not -1 <= k <= MAX_FANOUT:
            raise SamplingError(
                f"hop {hop_number}: fanout {k} of {key} is invalid; use -1, 0 or an int from 1 to {MAX_FANOUT}"
            )
        if key in named:
            raise SamplingError(f"hop {hop_number}: relation {key} is named twice in {str(hop)!r}; give it one fanout")
        named.add(key)
        fanouts[relation_keys.index(key)] = k
    return fanouts
