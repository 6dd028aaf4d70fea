"""Preparing a heterogeneous graph: one global id space, scored as a whole, reordered per type.

On disk a heterogeneous dataset is a homogeneous one plus types: `colptr`/`row` are the CSC of every
relation's edges over global ids (type t owns `[offset_t, offset_t + count_t)`), each column's
entries grouped by relation id, and `edge_type` names the relation of each entry. One id space
(rather than a CSC per relation over per-type ids) keeps the sampler's node map, the slots,
labels, splits and scores single arrays; per-relation neighbour lists are the sub-ranges of a
column, found by a binary search over its `edge_type` slice.

Hotness: the score (wrpr: train nodes of the target type weighted) runs over the whole heterogeneous
graph; then each type's rows are reordered by score *within its own id range*, so a type's
hottest rows are a prefix of its range and of its `features.<type>` array, and a tier's share
of a type is a row count (`service/tiering/hetero.py` splits one byte budget across types).
"""

from __future__ import annotations

from pathlib import Path

import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.contract.hetero import HeteroSchema, NeighbourMean, NodeTypeInfo, RelationInfo
from graphtier.service.graph.csc import CSCGraph
from graphtier.service.graph.hetero_data import HeteroCSC, HeteroGraphData
from graphtier.service.hotness import ScoreSpec, compute_scores
from graphtier.service.hotness.scores import reverse_pagerank
from graphtier.service.prepared.catalog import DatasetWriter
from graphtier.service.prepared.edge_split import edge_split_note
from graphtier.service.prepared.neighbour_means import compute_neighbour_means
from graphtier.service.prepared.relation_split import split_relation
from graphtier.service.prepared.steps import PrepareConfig, PreparedContent, StepClock, split_sizes, write_node_arrays
from graphtier.service.sources.ogb_hetero import is_hetero_ogb, load_ogb_hetero

HETERO_OPTIONS = ("split_scheme", "reverse_relations", "num_classes")
# wrpr/rpr on a heterogeneous graph, unless the user sets them: the hops of a typical heterogeneous model (R-GCN and
# HGT run 2 layers on ogbn-mag) and a fanout of 10 per relation.
HETERO_SCORE_ITERATIONS = 2
HETERO_SCORE_FANOUT = 10


def feature_array_name(node_type: str) -> str:
    """The array holding a featured type's rows (type-local, reordered)."""
    return f"features.{node_type}"


def is_hetero_source(spec: str) -> bool:
    """Whether a dataset spec names a heterogeneous source (`ogb:DIR` in OGB's heterogeneous layout)."""
    scheme, _, target = spec.partition(":")
    return scheme == "ogb" and bool(target) and is_hetero_ogb(Path(target).expanduser())


def load_hetero(config: PrepareConfig) -> HeteroGraphData:
    unknown = sorted(set(config.source_options) - set(HETERO_OPTIONS))
    if unknown:
        raise DatasetSourceError(
            None,
            f"option(s) {', '.join(unknown)} not accepted by heterogeneous ogb: sources",
            fix=f"valid options: {', '.join(HETERO_OPTIONS)}",
        )
    if config.undirected:
        raise DatasetSourceError(
            None, "--undirected does not apply to a heterogeneous graph", fix="reverse relations are added by default"
        )
    target = Path(config.source.partition(":")[2]).expanduser()
    return load_ogb_hetero(target, **config.source_options)  # type: ignore[arg-type]  # names checked above


def type_blocked_permutation(scores: torch.Tensor, offsets: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(new_to_old, old_to_new) ordering each type's id range by descending score, ties by id;
    types keep their ranges."""
    parts = []
    for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
        parts.append(lo + torch.sort(scores[lo:hi], descending=True, stable=True).indices)
    new_to_old = torch.cat(parts)
    old_to_new = torch.empty_like(new_to_old)
    old_to_new[new_to_old] = torch.arange(new_to_old.numel())
    return new_to_old, old_to_new


def permute_hetero_csc(hetero: HeteroCSC, new_to_old: torch.Tensor, old_to_new: torch.Tensor) -> HeteroCSC:
    """The heterogeneous CSC relabelled by the permutation; entries keep their order within a column, so
    the relation groups stay grouped and `edge_type` moves with them."""
    graph = hetero.graph
    new_degree = graph.in_degree()[new_to_old]
    colptr = torch.zeros_like(graph.colptr)
    torch.cumsum(new_degree, 0, out=colptr[1:])
    shift = graph.colptr[:-1][new_to_old] - colptr[:-1]
    positions = shift.repeat_interleave(new_degree, output_size=graph.num_edges) + torch.arange(graph.num_edges)
    row = torch.index_select(old_to_new, 0, torch.index_select(graph.row, 0, positions))
    edge_type = torch.index_select(hetero.edge_type, 0, positions)
    return HeteroCSC(graph=CSCGraph(colptr=colptr, row=row), edge_type=edge_type)


def schema_of(
    data: HeteroGraphData, edge_type: torch.Tensor, neighbour_means: dict[str, list[NeighbourMean]] | None = None
) -> HeteroSchema:
    offsets = data.offsets()
    neighbour_means = neighbour_means or {}
    counts = torch.bincount(edge_type.to(torch.int64), minlength=len(data.relations)).tolist()
    return HeteroSchema(
        node_types=[
            NodeTypeInfo(
                name=name,
                count=count,
                offset=offsets[name],
                feature_dim=int(data.features[name].shape[1]) if name in data.features else 0,
                feature_array=feature_array_name(name) if name in data.features else None,
                neighbour_means=neighbour_means.get(name, []),
            )
            for name, count in data.num_nodes.items()
        ],
        relations=[
            RelationInfo(head=r.head, name=r.name, tail=r.tail, num_edges=counts[i], reverse_of=r.reverse_of)
            for i, r in enumerate(data.relations)
        ],
        target_type=data.target_type,
    )


def hetero_scores(
    graph: CSCGraph, spec: ScoreSpec, train: torch.Tensor | None
) -> tuple[torch.Tensor, dict[str, object]]:
    """Scores over the heterogeneous graph and the record of how they were made (for the manifest).

    wrpr and rpr sum every iteration's scores (`accumulate`): the reads of a node over all hops
    of a sample. The last iteration alone misses them on a heterogeneous graph, whose relations
    alternate between types (paper -> author -> paper): after an odd number of iterations the
    train papers' mass sits on the authors. On ACM the last iteration alone places a small
    fraction of the oracle's hits, the sum over the sample's hops nearly all of them.
    """
    if spec.kind not in ("wrpr", "rpr"):
        return compute_scores(graph, spec, train_ids=train), {**spec.model_dump(), "label": spec.label()}
    effective = spec.model_copy(
        update={"iterations": spec.iterations or HETERO_SCORE_ITERATIONS, "fanout": spec.fanout or HETERO_SCORE_FANOUT}
    )
    if spec.kind == "wrpr" and (train is None or train.numel() == 0):
        compute_scores(graph, effective, train_ids=train)  # raises: wrpr needs train ids
    scores = reverse_pagerank(
        graph,
        iterations=effective.effective_iterations,
        damping=spec.damping,
        train_ids=train if spec.kind == "wrpr" else None,
        fanout=effective.fanout,
        accumulate=True,
    )
    return scores, {**effective.model_dump(), "accumulate": True, "label": f"{effective.label()}, summed over hops"}


def prepare_hetero(
    config: PrepareConfig, writer: DatasetWriter, clock: StepClock
) -> tuple[PreparedContent, HeteroSchema, dict[str, object]]:
    """Read, build the heterogeneous CSC, score, reorder per type and write (in memory: heterogeneous sources
    are read whole). Returns what was written, the schema and the score record."""
    with clock.step("read source"):
        data = load_hetero(config)
    link = None
    if config.edge_split is not None:
        with clock.step("split edges"):
            link = split_relation(data, config.edge_split)  # val and test edges leave message passing
    with clock.step("neighbour means"):
        means = compute_neighbour_means(data)  # before the edge lists are freed; after an edge split
    with clock.step("build heterogeneous CSC"):
        hetero = data.to_global()
        for rel in data.relations:
            rel.src = rel.dst = torch.empty(0, dtype=torch.int64)  # free the edge lists
    offset = data.offsets()[data.target_type]
    splits = {name: ids + offset for name, ids in data.splits.items()}
    with clock.step(f"score ({config.score.kind})"):
        scores, score_record = hetero_scores(hetero.graph, config.score, splits.get("train"))
    schema = schema_of(data, hetero.edge_type, {t: [info for info, _ in found] for t, found in means.items()})
    with clock.step("reorder per type"):
        new_to_old, old_to_new = type_blocked_permutation(scores, schema.offsets())
        hetero = permute_hetero_csc(hetero, new_to_old, old_to_new)
    labels = None
    if data.labels is not None:
        labels = torch.full((schema.num_nodes,), -1, dtype=torch.int64)
        labels[offset : offset + data.labels.numel()] = data.labels
    with clock.step("write arrays"):
        writer.write("colptr", hetero.graph.colptr)
        writer.write("row", hetero.graph.row)
        writer.write("edge_type", hetero.edge_type)
        for info in schema.node_types:
            if info.feature_array is not None:
                local_order = new_to_old[info.offset : info.offset + info.count] - info.offset
                writer.write_rows(info.feature_array, data.features[info.name], local_order)
            for mean, rows in means.get(info.name, []):
                local_order = new_to_old[info.offset : info.offset + info.count] - info.offset
                writer.write_rows(mean.array, rows, local_order)
        write_node_arrays(writer, labels, splits, new_to_old, old_to_new, scores, None)
        if link is not None:
            link.write(writer, old_to_new)
    notes = list(data.notes)
    link_split = None
    if link is not None and config.edge_split is not None:
        link_split = {
            **link.describe(config.edge_split, learned_embeddings=False),
            "node_inputs": "per node type: features, or learned embeddings where a type has none",
        }
        notes.append(f"{config.edge_split.target_relation}: " + edge_split_note(link_split, budgeted=False))
    content = PreparedContent(
        num_nodes=schema.num_nodes,
        num_edges=hetero.graph.num_edges,
        feature_dim=0,
        num_classes=data.num_classes,
        split_sizes=split_sizes(splits),
        description=data.description,
        details={"heterogeneous": True},
        class_labels=data.class_labels,
        notes=notes,
        link_split=link_split,
    )
    return content, schema, score_record
