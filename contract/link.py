"""Link prediction's shared names: tasks, negative sampling, decoders and the evaluation protocol.

The CLI, the job spec, prepare and the trainer ranks all read these; the contract holds
them so each exists once.
"""

from __future__ import annotations

from typing import Literal

TaskKind = Literal["node", "link"]
NegativeSampling = Literal["uniform", "corrupt-tail"]
DecoderKind = Literal["dot", "mlp", "mlp+cn", "mlp+cn+aa"]
PAIR_FEATURE_DECODERS: frozenset[str] = frozenset({"mlp+cn", "mlp+cn+aa"})  # read a pair's common-neighbour features
CALIBRATED_DECODERS: frozenset[str] = frozenset({"mlp+cn+aa"})  # weigh a heuristic by validation Hits@K at evaluation

DEFAULT_EVAL_NEGATIVES = 100_000  # ogbl-collab: every positive is ranked against one pool of 100k random pairs
DEFAULT_HITS_K = 50  # ogbl-collab's Hits@50
DEFAULT_MRR_NEGATIVES = 100  # corrupted tails each positive is ranked against for MRR (ogbl-citation2's protocol)


def link_metric_names(split: str, hits_k: int) -> tuple[str, ...]:
    """The metrics a link-prediction job reports for `split`, as its result names them."""
    return (f"{split}_auc", f"{split}_mrr", f"{split}_hits@{hits_k}")
