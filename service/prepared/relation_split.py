"""Link prediction on a heterogeneous graph: the edge split of one target relation, made at prepare.

    graphtier dataset prepare ogb:DIR --edge-split 0.85,0.05,0.10 --target-relation paper-written_by-author

The target relation's edges (`head-rel-tail`, spelled as heterogeneous fanouts spell relations) are
split as `edge_split.split_edges` splits a homogeneous graph's, in the global id space; the
validation and test edges leave the graph messages pass over, in both directions: the relation
keeps its train edges and its reverse (`tail-rev_rel-head`, added by default) their reverses.
The other relations are untouched. The negative pools pair a node of the head type with one of
the tail type, so every evaluation ranks candidates of the right types. The pairs are written
as for a homogeneous split (`link_train`, ..., global reordered ids, head first) and the
manifest's `link_split` names the relation (`target_relation`).
"""

from __future__ import annotations

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.hetero_data import HeteroGraphData, Relation
from graphtier.service.prepared.edge_split import EdgeSplitSpec, LinkSplit, split_edges

TARGET_RELATION_FLAG = "--target-relation"


def target_relation(data: HeteroGraphData, spec: EdgeSplitSpec) -> Relation:
    """The relation `spec` names; DatasetSourceError naming the flag and the choices otherwise."""
    forward = [r.key for r in data.relations if r.reverse_of is None]
    if spec.target_relation is None:
        raise DatasetSourceError(
            data.origin or None,
            f"--edge-split on a heterogeneous graph splits one relation's edges: name it with {TARGET_RELATION_FLAG} "
            f"HEAD-REL-TAIL, one of {', '.join(forward)}",
        )
    if spec.files is not None:
        raise DatasetSourceError(
            data.origin or None,
            "--edge-split files:DIR is for homogeneous graphs; split a heterogeneous graph's relation by shares "
            "(--edge-split 0.85,0.05,0.10)",
        )
    for relation in data.relations:
        if relation.key == spec.target_relation:
            if relation.reverse_of is not None:
                raise DatasetSourceError(
                    data.origin or None,
                    f"{TARGET_RELATION_FLAG} {spec.target_relation} is a reverse relation added at prepare; "
                    f"name the relation it reverses, {relation.reverse_of}",
                )
            return relation
    raise DatasetSourceError(
        data.origin or None,
        f"{TARGET_RELATION_FLAG} {spec.target_relation!r} is not a relation of this graph; its relations are "
        f"{', '.join(forward)}",
    )


def split_relation(data: HeteroGraphData, spec: EdgeSplitSpec) -> LinkSplit:
    """Split the target relation's edges (global ids) and keep only its train edges, and their
    reverses, in `data` (see the module docstring)."""
    relation = target_relation(data, spec)
    offsets = data.offsets()
    head, tail = offsets[relation.head], offsets[relation.tail]
    ranges = (
        (head, head + data.num_nodes[relation.head]),
        (tail, tail + data.num_nodes[relation.tail]),
    )
    link = split_edges(
        data.total_nodes,
        relation.src + head,
        relation.dst + tail,
        spec,
        undirected=False,
        origin=data.origin,
        endpoint_ranges=ranges,
    )
    src, dst = link.message_edges()
    relation.src, relation.dst = src - head, dst - tail
    for reverse in data.relations:
        if reverse.reverse_of == relation.key:
            reverse.src, reverse.dst = relation.dst.clone(), relation.src.clone()
    return link
