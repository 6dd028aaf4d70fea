"""Hotness: score every node by how often sampling will touch it, then reorder by score.

After reordering, node ids are ranks (0 = hottest), so a node's tier is decided by
comparing its id with the placement boundaries: no lookup table on the hot path.
"""

from graphtier.service.hotness.reorder import Reordering, reorder_by_score
from graphtier.service.hotness.scores import SCORE_KINDS, ScoreSpec, compute_scores

__all__ = ["SCORE_KINDS", "Reordering", "ScoreSpec", "compute_scores", "reorder_by_score"]
