"""One batch type: every sampled engine prepares a :class:`MiniBatch`, whatever its task and graph.

In process, one rank: node and link tasks (static and temporal), homogeneous and typed graphs, on
``minibatch`` and ``split``; the edge batch builders the reference engines draw from, too.
"""

import pytest
import torch

from fleetgnn.distributed.testing import context_or_own
from fleetgnn.engines.batch import MiniBatch
from fleetgnn.graph.hetero_toy import toy_mag
from fleetgnn.graph.synthetic import generate_graph, spec_for
from fleetgnn.train import engine_from_config, load_config

SMALL = ["train.batch_size=16", "train.fanouts=[3,2]", "model.hidden=6", "train.device=cpu"]
LINK = ["train.task=link", "train.val_edges=0.1", "train.test_edges=0.1", "train.negatives=2"]
GRAPHS = {
    "plain": lambda: generate_graph(spec_for("tiny", 0.3), seed=4).to_undirected(),
    "temporal": lambda: generate_graph(spec_for("temporal-like", 0.002), seed=5),
    "typed": lambda: toy_mag(num_papers=60, num_authors=30, num_fields=5, seed=4),
}
#: (graph, task settings, model): the tasks every sampled engine trains
CASES = {
    "node": ("plain", [], "sage"),
    "link": ("plain", LINK, "sage"),
    "temporal link": ("temporal", LINK, "sage"),
    "typed node": ("typed", [], "rgcn"),
    "typed link": ("typed", [*LINK, "train.link_relation=author,writes,paper"], "rgcn"),
}


@pytest.mark.parametrize("engine", ["minibatch", "split"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_sampled_engine_prepares_a_minibatch(engine, case):
    graph, sets, model = CASES[case]
    cfg = load_config(None, [f"train.engine={engine}", f"model.name={model}", *SMALL, *sets])
    link, typed = "link" in case, "typed" in case
    with context_or_own(None) as ctx, engine_from_config(cfg, GRAPHS[graph](), ctx) as eng:
        batch = eng.prepare(0, 0)
        assert isinstance(batch, MiniBatch)
        assert (batch.src is not None) == link and (batch.neg is not None) == link
        assert (batch.target is None) == link  # a node task's labels are read in prepare
        assert (batch.splits is not None) == (engine == "split")
        assert isinstance(batch.seeds, dict) == typed and isinstance(batch.x, dict) == typed
        assert (batch.sample is not None) == link  # the sampler's NodeSample of the pairs
        if link:  # times only where the task samples in time
            timed = getattr(batch.sample, "seed_time", None) is not None
            assert timed == (case == "temporal link")
        assert batch.global_count > 0 and batch.t_sample >= 0 and batch.t_gather >= 0
        assert len(batch.hops) == len(batch.blocks) == 2
        assert eng._run_step(0, 0, batch, 0.0).count > 0  # the engine trains on it
        if link:  # the edge batches the reference engines draw are the same type
            assert isinstance(eng.edges.batch(0, 0), MiniBatch)


def test_minibatch_repr_and_hops():
    seeds = torch.arange(4)
    node = MiniBatch(["b0", "b1"], seeds, 8)
    assert repr(node) == "MiniBatch(node, layers=2, global_count=8)"
    assert node.hops == ["b0", "b1"]
    pairs = MiniBatch([], seeds, 3, seeds[:2], seeds[2:], seeds[:2, None], splits=["s"])
    assert repr(pairs) == "MiniBatch(link, 2 positives, layers=0, global_count=3)"
    assert pairs.hops == ["s"]
