"""fleetgnn's MRR and Hits@K equal ``ogb.linkproppred.Evaluator``'s on the same scores: the
ogbl-citation2 protocol (each positive ranked among its own negatives: MRR, Hits@1/3/10, ties
included) and the ogbl-collab / ogbl-ddi one (every positive against one shared set of
negatives: Hits@50 / Hits@20), also when the sums come from two "ranks". Skipped without ogb."""

import os

import numpy as np
import pytest
import torch

from fleetgnn.tasks.link_metrics import ranking_metrics, ranking_sums

os.environ.setdefault("OUTDATED_IGNORE", "1")  # ogb's import would ask PyPI for a newer ogb
linkproppred = pytest.importorskip("ogb.linkproppred")


def _fleetgnn(pos, neg, hits_at, parts=1):
    """Metrics from ranking sums added over ``parts`` contiguous shares of the queries."""
    cuts = np.linspace(0, pos.shape[0], parts + 1).astype(int)
    sums = sum(ranking_sums(pos[a:b], neg[a:b], hits_at) for a, b in zip(cuts, cuts[1:]))
    return ranking_metrics(sums, "test", hits_at)


@pytest.mark.parametrize("ties", [False, True])
def test_citation2_mrr_and_hits(ties):
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(500, generator=g, dtype=torch.float64) + 1.0
    neg = torch.randn(500, 1000, generator=g, dtype=torch.float64)
    if ties:  # coarse scores: many negatives equal their positive
        pos, neg = torch.round(pos * 4) / 4, torch.round(neg * 4) / 4
        assert (neg == pos[:, None]).any(1).float().mean() > 0.5
    ogb = linkproppred.Evaluator("ogbl-citation2").eval({"y_pred_pos": pos, "y_pred_neg": neg})
    for parts in (1, 2):
        got = _fleetgnn(pos, neg, (1, 3, 10), parts)
        assert got["test_mrr"] == pytest.approx(float(ogb["mrr_list"].mean()), rel=1e-6)
        for k in (1, 3, 10):
            want = float(ogb[f"hits@{k}_list"].mean())
            assert got[f"test_hits@{k}"] == pytest.approx(want, rel=1e-6), (k, parts)  # float32


@pytest.mark.parametrize(("name", "k"), [("ogbl-collab", 50), ("ogbl-ddi", 20)])
def test_shared_negative_hits(name, k):
    """The collab/ddi protocol: one set of negatives for every positive (each query's own
    negatives are that set). Scores are distinct, as that protocol requires (OGB counts a
    positive tied with the K-th negative as a miss; fleetgnn's rank splits ties in half)."""
    g = torch.Generator().manual_seed(1)
    pos = torch.randn(2000, generator=g, dtype=torch.float64) + 2.0
    neg = torch.randn(3000, generator=g, dtype=torch.float64)
    evaluator = linkproppred.Evaluator(name)
    assert evaluator.K == k
    ogb = evaluator.eval({"y_pred_pos": pos, "y_pred_neg": neg})[f"hits@{k}"]
    assert 0.05 < ogb < 0.95  # neither trivial
    shared = neg.expand(pos.shape[0], -1)
    for parts in (1, 2):
        got = _fleetgnn(pos, shared, (k,), parts)[f"test_hits@{k}"]
        assert got == pytest.approx(ogb, abs=1e-12)
