"""Edge splits for link prediction, made at prepare (`dataset prepare --edge-split 0.85,0.05,0.10`).

As PyG's `RandomLinkSplit` does: the edges are shuffled with a seed and cut into train,
validation and test edges; the validation and test edges are removed from the graph that
is written (so no message passes over them), the train edges stay in it. An undirected
graph (`--undirected`, or an edge list that already holds every reverse) is split by
undirected pair, so the reverse of a test edge is not left behind in the training graph.
Each evaluation split also gets a fixed pool of random negative pairs (OGB's collab
protocol: Hits@K of every positive against the same pool), drawn from node pairs that are
no edge of the whole graph, so every job and every baseline scores the same negatives.

The split may instead be read from files (`--edge-split files:DIR`, OGB's way: fixed val and
test edges): `DIR/val.txt` and `DIR/test.txt` hold one pair per line (`u v`, the ids as the
source spells them), optionally `val_neg.txt` and `test_neg.txt` the negatives to rank them
against (otherwise pools are drawn as above); the train edges are every other edge of the graph,
the val and test pairs leave it (either way when undirected).

Pairs are written `[n, 2]` int64 in the reordered id space (`link_train`, `link_val`,
`link_test`, `link_val_neg`, `link_test_neg`); the manifest's `link_split` says how.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from graphtier.contract.errors import DatasetSourceError
from graphtier.contract.link import DEFAULT_EVAL_NEGATIVES

if TYPE_CHECKING:
    from graphtier.service.prepared.catalog import DatasetWriter

LINK_SPLITS = ("train", "val", "test")
LINK_NEGATIVE_SPLITS = ("val", "test")
_FRACTION_TOLERANCE = 1e-6
FILES_PREFIX = "files:"


LINK_ARRAY_PREFIX = "link_"


def link_array(split: str, *, negative: bool = False) -> str:
    """The array name of a split's positive (or negative) pairs, e.g. `link_test_neg`."""
    return f"{LINK_ARRAY_PREFIX}{split}_neg" if negative else f"{LINK_ARRAY_PREFIX}{split}"


class EdgeSplitSpec(BaseModel):
    """What `--edge-split` asked for: train/val/test shares of the edges, the seed and the negatives."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fractions: tuple[float, float, float] | None = Field(
        None, description="train, val, test shares of the edges; sum 1 (None: `files` give the split)"
    )
    files: Path | None = Field(None, description="a folder of val.txt, test.txt (and *_neg.txt) pairs to use")
    seed: int = Field(0, ge=0, lt=2**63, description="seed of the shuffle and of the negative pools")
    eval_negatives: int = Field(
        DEFAULT_EVAL_NEGATIVES, ge=1, le=1 << 26, description="random negative pairs per evaluation split"
    )
    target_relation: str | None = Field(
        None,
        description="a heterogeneous graph: the relation `head-rel-tail` whose edges are split (see relation_split.py)",
    )

    @field_validator("fractions")
    @classmethod
    def _check_fractions(cls, fractions: tuple[float, float, float] | None) -> tuple[float, float, float] | None:
        if fractions is None:
            return None
        if any(not math.isfinite(f) or f < 0 for f in fractions):
            raise ValueError(f"edge split shares must be finite and >= 0, got {list(fractions)}")
        if fractions[0] <= 0:
            raise ValueError(f"edge split {list(fractions)} leaves no train edges")
        if abs(sum(fractions) - 1.0) > _FRACTION_TOLERANCE:
            raise ValueError(f"edge split shares {list(fractions)} must sum to 1, not {sum(fractions):g}")
        return fractions

    @model_validator(mode="after")
    def _one_way(self) -> EdgeSplitSpec:
        if (self.fractions is None) == (self.files is None):
            raise ValueError("an edge split is either shares (0.85,0.05,0.10) or files:DIR, exactly one")
        return self

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        seed: int = 0,
        eval_negatives: int = DEFAULT_EVAL_NEGATIVES,
        target_relation: str | None = None,
    ) -> EdgeSplitSpec:
        """`0.85,0.05,0.10` or `files:DIR` -> a spec; ValueError naming the flag and what is wrong."""
        if text.startswith(FILES_PREFIX):
            folder = Path(text.removeprefix(FILES_PREFIX)).expanduser()
            if not folder.is_dir():
                raise ValueError(f"--edge-split {text!r}: {folder} is not a folder of val.txt and test.txt")
            return cls(
                files=folder.resolve(), seed=seed, eval_negatives=eval_negatives, target_relation=target_relation
            )
        try:
            values = tuple(float(part) for part in text.split(","))
        except ValueError:
            raise ValueError(f"--edge-split {text!r}: expected three shares like 0.85,0.05,0.10") from None
        if len(values) != 3:
            raise ValueError(f"--edge-split {text!r}: expected three shares (train,val,test), got {len(values)}")
        return cls(
            fractions=values,
            seed=seed,
            eval_negatives=eval_negatives,
            target_relation=target_relation,
        )


class LinkSplit:
    """The split of one graph's edges, in the source's id space (see the module docstring)."""

    def __init__(
        self,
        pairs: dict[str, torch.Tensor],
        negatives: dict[str, torch.Tensor],
        *,
        undirected_pairs: bool,
        self_loops_dropped: int,
    ) -> None:
        self.pairs, self.negatives = pairs, negatives
        self.undirected_pairs, self.self_loops_dropped = undirected_pairs, self_loops_dropped

    def message_edges(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(src, dst) of the graph messages pass over: the train pairs (both ways when undirected)."""
        train = self.pairs["train"]
        src, dst = train[:, 0], train[:, 1]
        if self.undirected_pairs:
            return torch.cat([src, dst]), torch.cat([dst, src])
        return src.clone(), dst.clone()

    def write(self, writer: DatasetWriter, old_to_new: torch.Tensor) -> None:
        """Every pair array, mapped into the reordered id space."""
        for split, pairs in self.pairs.items():
            writer.write(link_array(split), old_to_new[pairs])
        for split, pairs in self.negatives.items():
            writer.write(link_array(split, negative=True), old_to_new[pairs])

    def describe(self, spec: EdgeSplitSpec, *, learned_embeddings: bool) -> dict[str, object]:
        """The manifest's `link_split`."""
        return {
            "node_inputs": "learned embeddings" if learned_embeddings else "features",
            "fractions": list(spec.fractions) if spec.fractions is not None else None,
            "files": str(spec.files) if spec.files is not None else None,
            "seed": spec.seed,
            "pairs": "undirected" if self.undirected_pairs else "directed",
            "sizes": {split: int(p.shape[0]) for split, p in self.pairs.items()},
            "eval_negatives": {split: int(p.shape[0]) for split, p in self.negatives.items()},
            "self_loops_dropped": self.self_loops_dropped,
            "removed_from_graph": ["val", "test"],
            **({"target_relation": spec.target_relation} if spec.target_relation is not None else {}),
        }


def _is_symmetric(num_nodes: int, src: torch.Tensor, dst: torch.Tensor) -> bool:
    forward = torch.unique(src * num_nodes + dst)
    backward = torch.unique(dst * num_nodes + src)
    return forward.numel() == backward.numel() and bool(torch.equal(forward, backward))


def split_edges(
    num_nodes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    spec: EdgeSplitSpec,
    *,
    undirected: bool,
    origin: str = "",
    original_ids: torch.Tensor | None = None,
    endpoint_ranges: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> LinkSplit:
    """Shuffle the distinct edges (pairs when undirected) with `spec.seed` and cut them, or take the
    val and test pairs from `spec.files` (module docstring). `endpoint_ranges`: the id ranges
    `[lo, hi)` the negative pairs' sources and destinations are drawn from (a heterogeneous relation's
    head and tail types; default every node)."""
    if spec.files is not None:
        return _split_from_files(num_nodes, src, dst, spec, undirected=undirected, original_ids=original_ids)
    assert spec.fractions is not None
    keep = src != dst
    loops = int((~keep).sum())
    src, dst = src[keep], dst[keep]
    pairs_undirected = undirected or _is_symmetric(num_nodes, src, dst)
    if pairs_undirected:
        lo, hi = torch.minimum(src, dst), torch.maximum(src, dst)
        keys = torch.unique(lo * num_nodes + hi)
    else:
        keys = torch.unique(src * num_nodes + dst)
    total = keys.numel()
    n_val = int(math.floor(spec.fractions[1] * total))
    n_test = int(math.floor(spec.fractions[2] * total))
    if total - n_val - n_test < 1 or (spec.fractions[1] > 0 and n_val == 0) or (spec.fractions[2] > 0 and n_test == 0):
        raise DatasetSourceError(
            origin or None,
            f"--edge-split {list(spec.fractions)} of {total} distinct edges leaves a split empty; "
            "the graph is too small for these shares",
        )
    generator = torch.Generator().manual_seed(spec.seed)
    shuffled = keys[torch.randperm(total, generator=generator)]
    cut = {"val": shuffled[:n_val], "test": shuffled[n_val : n_val + n_test], "train": shuffled[n_val + n_test :]}
    pairs = {split: torch.stack([cut[split] // num_nodes, cut[split] % num_nodes], dim=1) for split in LINK_SPLITS}
    negatives = {
        split: _negative_pool(num_nodes, keys, pairs_undirected, spec.eval_negatives, generator, endpoint_ranges)
        for split in LINK_NEGATIVE_SPLITS
        if pairs[split].shape[0] > 0
    }
    return LinkSplit(pairs, negatives, undirected_pairs=pairs_undirected, self_loops_dropped=loops)


def _pair_keys(num_nodes: int, src: torch.Tensor, dst: torch.Tensor, undirected: bool) -> torch.Tensor:
    """One key per pair (either order alike when `undirected`), in the pairs' order."""
    if undirected:
        src, dst = torch.minimum(src, dst), torch.maximum(src, dst)
    return src * num_nodes + dst


def _distinct_keys(num_nodes: int, src: torch.Tensor, dst: torch.Tensor, undirected: bool) -> torch.Tensor:
    return torch.unique(_pair_keys(num_nodes, src, dst, undirected))


def read_pairs(path: Path, original_ids: torch.Tensor | None, num_nodes: int) -> torch.Tensor:
    """[n, 2] node pairs of a text file (`u v` per line, '#' comments), mapped to the graph's ids."""
    try:
        values = np.loadtxt(path, dtype=np.int64, comments="#", ndmin=2)
    except OSError as exc:
        raise DatasetSourceError(str(path), f"cannot read the pairs ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise DatasetSourceError(str(path), f"expected two integer ids per line: {exc}") from None
    if values.size == 0:
        return torch.empty(0, 2, dtype=torch.int64)
    if values.shape[1] != 2:
        raise DatasetSourceError(str(path), f"expected two ids per line, found {values.shape[1]}")
    pairs = torch.from_numpy(values)
    if original_ids is not None:  # the source renumbered its ids: map the file's through the same table
        order = torch.argsort(original_ids)
        known = original_ids[order]
        position = torch.searchsorted(known, pairs).clamp_max(known.numel() - 1)
        missing = known[position] != pairs
        if bool(missing.any()):
            line = int(missing.any(dim=1).nonzero()[0])
            raise DatasetSourceError(str(path), f"line {line + 1}: node {int(pairs[missing][0])} is not in the graph")
        return order[position]
    bad = (pairs < 0) | (pairs >= num_nodes)
    if bool(bad.any()):
        line = int(bad.any(dim=1).nonzero()[0])
        raise DatasetSourceError(str(path), f"line {line + 1}: node ids must lie in [0, {num_nodes})")
    return pairs


def _split_from_files(
    num_nodes: int,
    src: torch.Tensor,
    dst: torch.Tensor,
    spec: EdgeSplitSpec,
    *,
    undirected: bool,
    original_ids: torch.Tensor | None,
) -> LinkSplit:
    """Val and test pairs (and maybe their negatives) from `spec.files`; every other edge trains."""
    assert spec.files is not None
    keep = src != dst
    loops = int((~keep).sum())
    src, dst = src[keep], dst[keep]
    pairs_undirected = undirected or _is_symmetric(num_nodes, src, dst)
    keys = _distinct_keys(num_nodes, src, dst, pairs_undirected)
    pairs = {split: read_pairs(spec.files / f"{split}.txt", original_ids, num_nodes) for split in LINK_NEGATIVE_SPLITS}
    _check_held_out(spec.files, pairs, num_nodes, pairs_undirected, original_ids)
    held_out = torch.cat([_distinct_keys(num_nodes, p[:, 0], p[:, 1], pairs_undirected) for p in pairs.values()])
    train = keys[~torch.isin(keys, held_out)]
    if train.numel() == 0:
        raise DatasetSourceError(str(spec.files), "the val and test pairs leave no train edge in the graph")
    pairs["train"] = torch.stack([train // num_nodes, train % num_nodes], dim=1)
    generator = torch.Generator().manual_seed(spec.seed)
    every = torch.unique(torch.cat([keys, held_out]))
    negatives = {}
    for split in LINK_NEGATIVE_SPLITS:
        given = spec.files / f"{split}_neg.txt"
        if given.exists():
            negatives[split] = read_pairs(given, original_ids, num_nodes)
            _check_negatives(given, negatives[split], every, num_nodes, pairs_undirected, original_ids)
        elif pairs[split].shape[0] > 0:
            negatives[split] = _negative_pool(num_nodes, every, pairs_undirected, spec.eval_negatives, generator)
    return LinkSplit(
        {split: pairs[split] for split in LINK_SPLITS}, negatives, undirected_pairs=pairs_undirected,
        self_loops_dropped=loops,
    )  # fmt: skip


def _refuse_first(
    path: Path, pairs: torch.Tensor, bad: torch.Tensor, why: str, original_ids: torch.Tensor | None
) -> None:
    """DatasetSourceError naming the first of `pairs` (of `path`) that `bad` marks, in the file's ids, and `why`."""
    if bool(bad.any()):
        first = int(bad.nonzero()[0])
        pair = pairs[first] if original_ids is None else original_ids[pairs[first]]
        u, v = pair.tolist()
        raise DatasetSourceError(str(path), f"pair {first + 1} ({u} {v}) {why}")


def _check_held_out(
    folder: Path, pairs: dict[str, torch.Tensor], num_nodes: int, undirected: bool, original_ids: torch.Tensor | None
) -> None:
    """Val and test pairs that evaluate something: each file holds pairs, none a self-loop (the graph's
    are dropped), and no pair in both (a test pair seen by validation is no test)."""
    for split, given in pairs.items():
        path = folder / f"{split}.txt"
        if given.shape[0] == 0:
            raise DatasetSourceError(str(path), f"holds no pairs: a link job needs {split} pairs to evaluate on")
        loops = given[:, 0] == given[:, 1]
        _refuse_first(path, given, loops, "is a self-loop; the graph's self-loops are dropped", original_ids)
    val, test = (_pair_keys(num_nodes, pairs[split][:, 0], pairs[split][:, 1], undirected) for split in ("val", "test"))
    _refuse_first(folder / "test.txt", pairs["test"], torch.isin(test, val), "is in val.txt too", original_ids)


def _check_negatives(
    path: Path,
    given: torch.Tensor,
    edges: torch.Tensor,
    num_nodes: int,
    undirected: bool,
    original_ids: torch.Tensor | None,
) -> None:
    """Negatives that are negatives: no self-loop, no edge of the graph (held-out pairs included)."""
    _refuse_first(path, given, given[:, 0] == given[:, 1], "is a self-loop, not a negative", original_ids)
    edge = torch.isin(_pair_keys(num_nodes, given[:, 0], given[:, 1], undirected), edges)
    _refuse_first(path, given, edge, "is an edge of the graph (or a val or test pair), not a negative", original_ids)


def _negative_pool(
    num_nodes: int,
    edge_keys: torch.Tensor,
    undirected: bool,
    count: int,
    generator: torch.Generator,
    endpoint_ranges: tuple[tuple[int, int], tuple[int, int]] | None = None,
) -> torch.Tensor:
    """`count` random pairs (u != v) that are no edge of the whole graph (either way when undirected),
    u and v drawn from `endpoint_ranges` (default: every node)."""
    if num_nodes < 2:
        raise DatasetSourceError(None, "a graph of one node has no negative pairs to evaluate against")
    sources, destinations = endpoint_ranges or ((0, num_nodes), (0, num_nodes))
    found: list[torch.Tensor] = []
    have = 0
    while have < count:
        draw = max(2 * (count - have), 1024)
        u = torch.randint(*sources, (draw,), generator=generator)
        v = torch.randint(*destinations, (draw,), generator=generator)
        ok = u != v
        key = torch.minimum(u, v) * num_nodes + torch.maximum(u, v) if undirected else u * num_nodes + v
        position = torch.searchsorted(edge_keys, key).clamp_max(max(edge_keys.numel() - 1, 0))
        ok &= edge_keys[position] != key
        chosen = torch.stack([u[ok], v[ok]], dim=1)[: count - have]
        found.append(chosen)
        have += chosen.shape[0]
    return torch.cat(found)


def edge_split_note(link_split: dict[str, object], *, budgeted: bool) -> str:
    """What `dataset prepare` prints about the split it made."""
    sizes = link_split["sizes"]
    assert isinstance(sizes, dict)
    note = (
        f"edge split by {link_split['pairs']} pair: {sizes['train']:,} train, {sizes['val']:,} val, "
        f"{sizes['test']:,} test edges (val and test removed from the graph); node inputs: {link_split['node_inputs']}"
    )
    if budgeted:
        note += "; the split draws over the whole edge list, so it was prepared in memory, not under the budget"
    return note
