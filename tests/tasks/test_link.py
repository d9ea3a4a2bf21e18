"""Link prediction's pieces: keyed negatives, pair losses, metrics from summable sums."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fleetgnn.errors import ConfigError
from fleetgnn.tasks.link import NegativeSampler, bce_loss, bpr_loss
from fleetgnn.tasks.link_metrics import (
    auc_ap,
    histogram_sums,
    ranking_metrics,
    ranking_sums,
    score_bins,
)


def test_negatives_are_keyed_by_the_pair_and_step_not_the_batch():
    s = NegativeSampler(1000, k=4, seed=3)
    src, dst = torch.arange(50), torch.arange(50, 100)
    whole = s.sample(src, dst, step=7)
    assert whole.shape == (50, 4) and whole.dtype == torch.int64
    assert whole.min() >= 0 and whole.max() < 1000
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(s.sample(src[perm], dst[perm], step=7), whole[perm])  # any batching
    assert torch.equal(s.sample(src[:10], dst[:10], step=7), whole[:10])  # any world size
    assert not torch.equal(s.sample(src, dst, step=8), whole)
    assert not torch.equal(NegativeSampler(1000, k=4, seed=4).sample(src, dst, 7), whole)


def test_uniform_and_degree_biased_negatives_follow_their_distributions():
    n = 20
    deg = np.arange(1, n + 1, dtype=np.float64)
    src = torch.arange(20000) % n
    dst = torch.arange(20000) // n
    for kind, w in (("uniform", np.ones(n)), ("degree", deg**0.75)):
        s = NegativeSampler(n, k=2, kind=kind, degrees=deg, seed=0)
        got = np.bincount(s.sample(src, dst, 0).reshape(-1).numpy(), minlength=n) / 40000
        assert np.abs(got - w / w.sum()).max() < 0.01, kind
    with pytest.raises(ConfigError, match="negative sampler 'zipf'"):
        NegativeSampler(n, kind="zipf")
    with pytest.raises(ConfigError, match="must be an int >= 1"):
        NegativeSampler(n, k=0)


def test_losses_match_their_formulas():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(6, 4, generator=g, dtype=torch.float64)
    pos = F.binary_cross_entropy_with_logits(
        s[:, 0], torch.ones(6, dtype=torch.float64), reduction="none"
    )
    neg = F.binary_cross_entropy_with_logits(
        s[:, 1:], torch.zeros(6, 3, dtype=torch.float64), reduction="none"
    )
    assert torch.allclose(bce_loss(s), pos + neg.mean(1))
    want = -torch.log(torch.sigmoid(s[:, :1] - s[:, 1:])).mean(1)
    assert torch.allclose(bpr_loss(s), want)


def test_bins_are_monotone_in_the_score():
    x = torch.tensor([-1e30, -5.0, -1e-3, -0.0, 0.0, 1e-3, 0.5, 5.0, 1e30])
    b = score_bins(x)
    assert (b[1:] >= b[:-1]).all() and b.min() >= 0


def test_auc_ap_from_histograms_agree_with_sklearn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    pos = rng.normal(1.0, 2.0, 10000)
    neg = rng.normal(-1.0, 2.0, 10000)
    y = np.r_[np.ones(pos.size), np.zeros(neg.size)]
    s = np.r_[pos, neg]
    auc, ap = auc_ap(histogram_sums(torch.from_numpy(pos), torch.from_numpy(neg)))
    assert auc == pytest.approx(metrics.roc_auc_score(y, s), abs=1e-3)
    assert ap == pytest.approx(metrics.average_precision_score(y, s), abs=1e-3)
    # ties (equal scores) are treated as scikit-learn treats them: exactly
    tp, tn = np.round(pos), np.round(neg)
    auc, ap = auc_ap(histogram_sums(torch.from_numpy(tp), torch.from_numpy(tn)))
    assert auc == pytest.approx(metrics.roc_auc_score(y, np.r_[tp, tn]), abs=1e-12)
    assert ap == pytest.approx(metrics.average_precision_score(y, np.r_[tp, tn]), abs=1e-12)


def test_histograms_and_ranking_sums_add_over_ranks():
    g = torch.Generator().manual_seed(1)
    pos, neg = torch.randn(300, generator=g), torch.randn(300, generator=g) - 0.5
    whole = histogram_sums(pos, neg)
    parts = histogram_sums(pos[:100], neg[:170]) + histogram_sums(pos[100:], neg[170:])
    assert torch.equal(whole, parts)  # integer counts: a 2-rank sum is the 1-rank result
    qneg = torch.randn(300, 20, generator=g)
    r = ranking_sums(pos, qneg)
    assert torch.allclose(
        ranking_sums(pos[:120], qneg[:120]) + ranking_sums(pos[120:], qneg[120:]), r
    )


def test_mrr_and_hits_match_ogbs_definition():
    pos = torch.tensor([3.0, 0.0, 1.0])
    neg = torch.tensor([[1.0, 2.0, 4.0], [1.0, 2.0, 3.0], [1.0, 1.0, 0.0]])
    # ranks: 1 + 1 = 2; 1 + 3 = 4; 1 + (0 + 2) / 2 = 2
    got = ranking_metrics(ranking_sums(pos, neg, (1, 2)), "val", (1, 2))
    assert got["val_mrr"] == pytest.approx((1 / 2 + 1 / 4 + 1 / 2) / 3)
    assert got["val_hits@1"] == 0.0 and got["val_hits@2"] == pytest.approx(2 / 3)


def test_capped_evaluation_scores_spread_pairs_from_their_endpoints_rows_only():
    from fleetgnn.graph.edge_split import split_edges
    from fleetgnn.graph.synthetic import generate_graph, spec_for
    from fleetgnn.nn.decoders import DotDecoder
    from fleetgnn.tasks import LinkPrediction

    split = split_edges(generate_graph(spec_for("tiny", 0.3), seed=4).to_undirected(), 0.1, 0.1)
    n = split.train_graph.num_nodes
    h = torch.randn(n, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    full = LinkPrediction(split)
    capped = LinkPrediction(split, eval_edges=9)
    assert full.eval_nodes() is None
    for s in ("val", "test"):
        at = capped.eval_positions(s)
        total = split.pos[s].shape[1]
        assert at.size == 9 and np.all(np.diff(at) > 0) and at[-1] > total // 2  # spread
        parts = [capped.eval_positions(s, (r, 3)) for r in range(3)]
        assert np.array_equal(np.concatenate(parts), at)  # the ranks' shares make the whole
        assert np.array_equal(full.eval_positions(s), np.arange(total))
    nodes = capped.eval_nodes()
    assert 0 < nodes.size < n and np.all(np.diff(nodes) > 0)
    want = capped.evaluate(h, DotDecoder())  # capped pairs, scored from every node's rows
    got = capped.evaluate(h[torch.from_numpy(nodes)], DotDecoder(), nodes=nodes)
    assert got == pytest.approx(want, rel=1e-12)
    assert want != pytest.approx(full.evaluate(h, DotDecoder()), rel=1e-12)
    with pytest.raises(ConfigError, match="'eval_edges' must be an int >= 1"):
        LinkPrediction(split, eval_edges=0)
