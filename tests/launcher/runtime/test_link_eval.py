"""Link-prediction metrics against brute force: AUC, Hits@K (ogbl-collab) and MRR (ogbl-citation2)."""

import torch

from graphtier.launcher.runtime.link_eval import auc, hits_at_k, mrr, mrr_tails


def test_auc_counts_every_pair_and_ties_half():
    generator = torch.Generator().manual_seed(0)
    pos = torch.randint(0, 20, (50,), generator=generator).float()
    neg = torch.randint(0, 20, (70,), generator=generator).float()  # many ties
    wins = (pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()
    assert auc(pos, neg) == float(wins.mean())
    assert auc(torch.tensor([2.0, 3.0]), torch.tensor([0.0, 1.0])) == 1.0


def test_hits_at_k_beats_the_kth_best_negative():
    neg = torch.arange(100).float()  # the 3rd best negative scores 97
    pos = torch.tensor([96.0, 97.0, 97.5, 200.0])
    assert hits_at_k(pos, neg, 3) == 0.5
    assert hits_at_k(pos, neg[:2], 3) == 1.0  # fewer negatives than K: every positive is a hit


def test_mrr_ranks_each_positive_among_its_own_tails():
    pos = torch.tensor([5.0, 1.0, 3.0])
    tails = torch.tensor([[1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [3.0, 4.0, 0.0]])
    # ranks: 1; 4; one tie and one above -> 0.5 * (2 + 1) + 1 = 2.5
    assert abs(mrr(pos, tails) - (1 + 1 / 4 + 1 / 2.5) / 3) < 1e-12


def test_mrr_tails_are_fixed_per_split():
    positives = torch.zeros(4, 2, dtype=torch.int64)
    assert torch.equal(mrr_tails("test", positives, 50), mrr_tails("test", positives, 50))
    assert not torch.equal(mrr_tails("test", positives, 50), mrr_tails("val", positives, 50))
