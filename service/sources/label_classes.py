"""Labels as class indices: bounded by an explicit class count, or made dense with the mapping kept.

A model has one output per class up to the largest label, so a label set like
{0, 5, 1000000000} read as given means a billion outputs. `label_classes` makes labels
usable before anything is prepared:

- with `num_classes=N` (`dataset prepare --num-classes N`) the labels are kept as they are and
  must lie in `[0, N)` (or be -1, unlabelled); any other value is an error naming it and the
  first node that has it;
- without it, labels that already are `0..k-1` are kept; any other set (gaps, a 1-based
  numbering, huge ids) is remapped to `0..k-1` in sorted order, `class_labels[i]` records the
  source's label of class i (kept in the manifest), and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graphtier.contract.errors import DatasetSourceError
from graphtier.service.graph.graph_data import UNLABELLED

_SHOWN = 6  # source labels spelled out in a note


@dataclass(frozen=True)
class LabelClasses:
    """Labels checked by `label_classes`.

    Attributes:
        labels: int64 `[N]`, classes `0..num_classes-1` or -1 (unlabelled).
        num_classes: the model's output count: the declared bound, else the number of classes.
        class_labels: the source's label of each class when the labels were remapped, else None.
        note: what was remapped and where the source's labels are, or None.
    """

    labels: torch.Tensor
    num_classes: int
    class_labels: list[int] | None = None
    note: str | None = None


def _node_name(index: int, node_ids: torch.Tensor | None) -> str:
    return f"node {int(node_ids[index]) if node_ids is not None else index}"


def _spell(values: list[int]) -> str:
    shown = ", ".join(str(v) for v in values[:_SHOWN])
    return "{" + shown + (f", ... {values[-1]}" if len(values) > _SHOWN else "") + "}"


def label_classes(
    labels: torch.Tensor, *, origin: str | None, num_classes: int | None = None, node_ids: torch.Tensor | None = None
) -> LabelClasses:
    """Check `labels` against `num_classes`, or make them dense (see the module docstring).

    `node_ids` are the source's ids of the nodes (an edge list's own ids), for messages.
    Raises `DatasetSourceError` naming `origin`, the label and its first node.
    """
    labelled = labels >= 0
    below = labels < UNLABELLED
    if num_classes is not None:
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise DatasetSourceError(origin, f"--num-classes must be an integer >= 1, got {num_classes!r}")
        bad = below | (labels >= num_classes)
        if bool(bad.any()):
            first = int(bad.nonzero()[0])
            value = int(labels[first])
            raise DatasetSourceError(
                origin,
                f"label {value} ({_node_name(first, node_ids)}) is outside the {num_classes} classes given by "
                f"--num-classes {num_classes} (labels must be 0..{num_classes - 1}, or -1 for unlabelled; "
                f"{int(bad.sum())} node(s) out of range)",
            )
        return LabelClasses(labels=labels, num_classes=num_classes)
    if bool(below.any()):
        first = int(below.nonzero()[0])
        raise DatasetSourceError(
            origin, f"label {int(labels[first])} ({_node_name(first, node_ids)}) is negative (use -1 for unlabelled)"
        )
    present = labels[labelled]
    if present.numel() == 0:
        return LabelClasses(labels=labels, num_classes=0)
    used = torch.unique(present, sorted=True)
    if int(used[-1]) + 1 == used.numel():  # already 0..k-1
        return LabelClasses(labels=labels, num_classes=int(used.numel()))
    dense = labels.clone()
    dense[labelled] = torch.searchsorted(used, present)
    k = int(used.numel())
    source = used.tolist()
    note = (
        f"labels {_spell(source)} are not classes 0..{k - 1}: remapped to {k} classes 0..{k - 1} in sorted order; "
        f"jobs train and report accuracy over these classes, and the manifest's class_labels gives each class's "
        f"source label (pass --num-classes N to keep labels below N as they are)"
    )
    return LabelClasses(labels=dense, num_classes=k, class_labels=source, note=note)
