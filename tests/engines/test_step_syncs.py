"""A steady-state sampled step issues no host synchronisation, counted on the CPU.

The engines' step code is the same on every device; what differs is behind registries (the
phase marks of :mod:`fleetgnn.engines.marks`, the kernels of :mod:`fleetgnn.kernels`). Counted
here with :class:`~tests.engines.sync_count.SyncCounter` on the path a GPU run takes: sampling
on a device replica of the topology (``store.sampling=device``, the torch sampler) and Adam as
torch's fused kernel (what :func:`~fleetgnn.train.setup.optimizer_from_config` builds on CUDA).

Budgets: the main thread of a steady-state step (training on a prefetched batch: forward, loss,
backward, optimizer, metric sums) makes 0 syncs, and at most ``OPS_PER_STEP`` aten ops for the
H100 profile's model (SAGE, 2 layers, hidden 128, fanouts 10,10). The H100's profile of that
step (``gpu-check-h100-stop35-bench.json``, ``minibatch_profile``) counted 633 aten ops and 17
stream syncs a step over every thread, sampling included; the budgets below are this code's
counts here plus ~10%, so an op or a sync added to the step fails the test. The prefetch
thread's sampler reads its hops' sizes (a sync on its own side stream, overlapping the step):
bounded per batch.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from fleetgnn.distributed import destroy, init
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import engine_from_config, load_config
from tests.engines.sync_count import SyncCounter

#: Main-thread aten ops of one steady-state step (measured here: node 247, link 298).
OPS_PER_STEP = {"node": 275, "link": 330}
#: Syncing ops of the prefetch thread per batch, 2 hops (measured here: node 13, link 25: the
#: hops' sizes, deduplication, a link batch's target-edge exclusion, and 4 of the CPU store's
#: read, which a one-rank GPU store skips).
SYNCS_PER_BATCH = {"node": 14, "link": 26}


@contextlib.contextmanager
def one_rank_engine(task: str, engine: str = "minibatch"):
    """The engine on a one-rank group of its own, closed and the group destroyed after."""
    ctx = init(backend="gloo")
    try:
        eng = _engine(task, engine, ctx)
        try:
            yield eng
        finally:
            eng.close()
    finally:
        destroy(ctx)


def _engine(task: str, engine: str, ctx):
    cfg = load_config(
        None,
        [
            f"train.engine={engine}",
            f"train.task={task}",
            "train.batch_size=64",
            "train.fanouts=[10,10]",
            "model.name=sage",
            "model.hidden=128",
            "store.sampling=device",
            "train.seed=3",
        ],
    )
    eng = engine_from_config(cfg, generate_graph(spec_for("tiny", 1.0), seed=4), ctx)
    # the optimizer a CUDA run gets: torch's fused Adam (no per-parameter step-count reads)
    eng.optimizer = torch.optim.Adam(eng.module.parameters(), lr=0.01, fused=True)
    return eng


def _count_epoch(eng):
    """(main-thread (ops, syncs) per step, prefetch thread's SyncCounter) of a warm epoch."""
    eng.run_epoch(0)  # warm: caches, the replica's index, the optimizer's state
    main, aside = SyncCounter(), SyncCounter()
    prepare = eng.prefetcher._prepare

    def counted(epoch, step):
        with aside:
            return prepare(epoch, step)

    eng.prefetcher._prepare = counted
    at: list[tuple[int, int]] = []
    with main:
        stats = eng.run_epoch(1, 0, lambda step, s: at.append((main.ops, main.syncs)))
    eng.prefetcher._prepare = prepare
    per_step = [(b[0] - a[0], b[1] - a[1]) for a, b in zip([(0, 0), *at], at, strict=False)]
    return per_step, aside, stats


def test_the_counter_sees_syncs():
    SyncCounter.check_sees_syncs()


@pytest.mark.parametrize("task", ["node", "link"])
def test_a_steady_minibatch_step_makes_no_host_sync(task):
    with one_rank_engine(task) as eng:
        per_step, aside, stats = _count_epoch(eng)
    assert len(per_step) == len(stats) >= 3
    steady = per_step[1:]  # step 0 prepares its batch inline (the prefetcher starts there)
    assert all(syncs == 0 for _, syncs in steady), (steady, aside.where)
    ops = max(n for n, _ in steady)
    assert ops <= OPS_PER_STEP[task], ops
    assert min(n for n, _ in steady) == ops  # every steady step issues the same ops
    assert aside.syncs <= SYNCS_PER_BATCH[task] * len(stats), aside.where
    # the numbers the step left on its device reached the epoch's stats
    assert all(s.count > 0 and s.loss_sum > 0 and 0 <= s.correct <= s.count for s in stats)


def test_a_steady_split_step_at_one_rank_makes_no_host_sync():
    with one_rank_engine("node", "split") as eng:
        per_step, _, stats = _count_epoch(eng)
    assert all(syncs == 0 for _, syncs in per_step[1:]), per_step
    assert len(stats) == len(per_step)


def test_pending_stats_resolve_to_what_the_step_computed():
    """The staged loss sum and correct count equal an eager read, and times are all there."""
    from fleetgnn.engines.base import TIME_KEYS
    from fleetgnn.engines.marks import HostMarks
    from fleetgnn.engines.step import StepLoss, train_step

    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3).double()
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    x, y = torch.randn(10, 4, dtype=torch.float64), torch.randint(0, 3, (10,))
    expect_loss = float(torch.nn.functional.cross_entropy(lin(x), y, reduction="sum"))
    expect_correct = int((lin(x).argmax(1) == y).sum())

    def forward():
        logits = lin(x)
        loss = torch.nn.functional.cross_entropy(logits, y, reduction="none")
        return StepLoss.of(lambda a, b: loss, logits, y, 10)

    pending = train_step(lin, opt, HostMarks(), forward)
    assert pending.ready()
    stats = pending.resolve()
    assert stats.loss_sum == pytest.approx(expect_loss, rel=1e-12)
    assert stats.correct == expect_correct and stats.count == 10
    assert set(TIME_KEYS) <= set(stats.times) and all(v >= 0 for v in stats.times.values())
    assert pending.loss_sum == stats.loss_sum and pending.resolve() is stats
